"""The ten-second text of a GraphDiff: what was added, removed and changed, by module."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Iterable, Optional

import networkx as nx

from torchgraphrec.text import clip, items_change, signed, value_text

if TYPE_CHECKING:
    from torchgraphrec.compare.core import GraphDiff

__all__ = ["summarize"]

#: Changes of a call's own attributes that, shared by this many calls, make one line.
SHARED = 3
#: The longest line of the summary, its indent included.
WIDTH = 110
_INDENT = "  "
CallKey = tuple


def _params(graph: nx.DiGraph, nodes: Optional[Iterable[str]] = None) -> int:
    nodes = graph.nodes if nodes is None else nodes
    return sum(math.prod(graph.nodes[n]["shape"]) for n in nodes
               if graph.nodes[n]["kind"] == "param" and not graph.nodes[n].get("buffer"))


def _call_name(graph: nx.DiGraph, layer: Optional[str]) -> str:
    if layer is None:
        return "the top level"
    attrs = graph.nodes[layer]
    name = attrs["qualname"] or attrs["type"]
    return name if attrs["call_index"] == 0 else f"{name}#{attrs['call_index']}"


def _call_key(graph: nx.DiGraph, node: str) -> Optional[CallKey]:
    layer = node if graph.nodes[node]["kind"] == "layer" else graph.nodes[node]["parent"]
    return None if layer is None else (graph.nodes[layer]["qualname"],
                                       graph.nodes[layer]["call_index"])


def _root(graph: nx.DiGraph, group: frozenset, node: str) -> Optional[str]:
    """The outermost call of ``group`` that holds ``node``, through calls all in ``group``."""
    root, up = None, node if graph.nodes[node]["kind"] == "layer" else graph.nodes[node]["parent"]
    while up is not None and up in group:
        root, up = up, graph.nodes[up]["parent"]
    return root


def _counts(diff: "GraphDiff", kind: str) -> list[int]:
    """How many nodes of ``kind`` were added, removed and changed."""
    sides = ((diff.b, diff.added), (diff.a, diff.removed), (diff.b, diff.changed))
    return [sum(graph.nodes[n]["kind"] == kind for n in nodes) for graph, nodes in sides]


def _calls(graph: nx.DiGraph, nodes: Iterable[str]) -> frozenset:
    return frozenset(n for n in nodes if graph.nodes[n]["kind"] == "layer")


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _headline(diff: "GraphDiff") -> str:
    before, after = _params(diff.a), _params(diff.b)
    if not diff:
        layers = sum(kind == "layer" for _, kind in diff.b.nodes(data="kind"))
        ops = sum(kind == "op" for _, kind in diff.b.nodes(data="kind"))
        return f"same: {layers:,} calls, {ops:,} ops, {after:,} params; nothing differs"
    parts = []
    for kind, noun in (("layer", "calls"), ("op", "ops"), ("param", "param tensors")):
        added, removed, changed = _counts(diff, kind)
        found = [f"{n:,} {word}" for n, word in
                 ((added, "added"), (removed, "removed"), (changed, "changed")) if n]
        if found:
            parts.append(f"{noun} " + ", ".join(found))
    wiring = len(diff.edges_added) + len(diff.edges_removed)
    parts += [f"{_plural(wiring, 'edge')} rewired"] if wiring else []
    models = (diff.a.graph.get("model"), diff.b.graph.get("model"))
    prefix = f"{models[0]} -> {models[1]}: " if models[0] != models[1] else ""
    total = (f"parameters {before:,} -> {after:,} ({signed(after - before)})"
             if before != after else "")
    return prefix + "; ".join(parts + ([total] if total else []))


def _subtree_lines(graph: nx.DiGraph, nodes: frozenset, tree: frozenset,
                   verb: str) -> list[tuple[int, str]]:
    """One line per call holding subtrees added (or removed) whole: ``nodes`` are all the
    nodes added, ``tree`` the layer calls among them."""
    members: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        root = _root(graph, tree, node)
        if root is not None:
            members[root].append(node)
    by_parent: dict[Optional[str], list[str]] = defaultdict(list)
    for root in sorted(members, key=lambda n: graph.nodes[n]["seq"]):
        by_parent[graph.nodes[root]["parent"]].append(root)
    lines = []
    for parent, roots in by_parent.items():
        inside = [n for root in roots for n in members[root]]
        kinds = Counter(graph.nodes[n]["kind"] for n in inside)
        names = ", ".join(f"{_call_name(graph, r)} ({graph.nodes[r]['type']})" for r in roots[:3])
        more = f" and {len(roots) - 3} more" if len(roots) > 3 else ""
        params = _params(graph, inside) * (1 if verb == "added" else -1)
        text = (f"{verb} under {_call_name(graph, parent)}: {names}{more}; "
                f"{_plural(kinds['layer'], 'call')}, {_plural(kinds['op'], 'op')} in all"
                + (f", params {signed(params)}" if params else ""))
        lines.append((len(inside), text))
    return lines


class _Notes:
    """What changed at one call, outside the subtrees added or removed whole."""

    def __init__(self) -> None:
        self.own: list[str] = []
        self.params: list[str] = []
        self.ops: list[str] = []
        self.delta = 0
        self.secondary = False
        self.type = ""


def _own_parts(changes: dict, shared: set) -> list[str]:
    parts = []
    if "type" in changes and ("type",) + changes["type"] not in shared:
        old, new = changes["type"]
        parts.append(f"{old} -> {new}")
    elif "settings" in changes and ("settings",) + changes["settings"] not in shared:
        parts.append(items_change(*changes["settings"]))
    if "training" in changes and ("training",) + changes["training"] not in shared:
        parts.append(f"training {changes['training'][0]} -> {changes['training'][1]}")
    return parts


def _layer_notes(diff: "GraphDiff", notes: dict, shared: set) -> None:
    for node, changes in diff.changed.items():
        attrs = diff.b.nodes[node]
        if attrs["kind"] != "layer":
            continue
        note = notes[_call_key(diff.b, node)]
        # the root call is named by the model's class already (there is no qualname)
        note.type = "" if "type" in changes or not attrs["qualname"] else attrs["type"]
        note.own += _own_parts(dict(changes), shared)
        if "num_params" in changes:
            note.delta = changes["num_params"][1] - changes["num_params"][0]
        note.secondary = not note.own and bool(set(changes) - {"type", "settings", "training"})


def _shared_changes(diff: "GraphDiff") -> Counter:
    """Changes many calls share: a call's own attributes, or the arguments of one kind of op
    (``dropout`` in train and in eval mode), keyed ``(what, old, new)``."""
    found: Counter = Counter()
    for node, changes in diff.changed.items():
        attrs = diff.b.nodes[node]
        if attrs["kind"] == "layer":
            for name in ("type", "settings", "training"):
                if name in changes:
                    found[(name, *changes[name])] += 1
        elif attrs["kind"] == "op" and "args" in changes:
            found[(f"{attrs['name']} args", *changes["args"])] += 1
    return found


def _shared_line(change: tuple, count: int) -> str:
    what, old, new = change
    if what.endswith(" args"):
        head, tail = f"{what[:-5]}: {items_change(old, new)}", f" in {count:,} ops"
    elif what == "settings":  # item by item, as a call's own line says it
        head, tail = f"settings {items_change(old, new)}", f" in {count:,} calls"
    else:
        head, tail = f"{what} {value_text(old)} -> {value_text(new)}", f" in {count:,} calls"
    # how many share it is what the line is for: a long change gives way, never the count
    return clip(head, WIDTH - len(_INDENT) - len(tail)) + tail


def _leaf_name(attrs: dict) -> str:
    return attrs["qualname"].rsplit(".", 1)[-1] if attrs["kind"] == "param" else attrs["name"]


def _loose_notes(diff: "GraphDiff", notes: dict, subtrees: tuple) -> None:
    """Ops and params added or removed, at the call they belong to, outside the subtrees
    added or removed whole."""
    sides = ((diff.b, diff.added, "+", subtrees[0]), (diff.a, diff.removed, "-", subtrees[1]))
    for graph, group, sign, tree in sides:
        for node in sorted(group, key=lambda n: graph.nodes[n]["seq"]):
            attrs = graph.nodes[node]
            if attrs["kind"] not in ("op", "param") or _root(graph, tree, node) is not None:
                continue
            note = notes[_call_key(graph, node)]
            text = f"{sign}{_leaf_name(attrs)}"
            if attrs["kind"] == "param":
                note.params.append(f"{text} ({value_text(attrs['shape'])})")
            else:
                note.ops.append(text)


def _changed_notes(diff: "GraphDiff", notes: dict, shared: set) -> None:
    """Ops given other arguments and params of another shape, at their call; an op whose
    result only took another shape makes its call a consequence."""
    for node, changes in diff.changed.items():
        attrs = diff.b.nodes[node]
        if attrs["kind"] not in ("op", "param"):
            continue
        if attrs["kind"] == "op" and (f"{attrs['name']} args", *changes.get("args", ())) in shared:
            continue  # said once, for all the ops that share it
        target = notes[_call_key(diff.b, node)]
        if attrs["kind"] == "op" and "args" not in changes:
            target.secondary = not target.own  # its result's shape followed its inputs'
            continue
        parts = [_change_text(k, *changes[k])
                 for k in changes if attrs["kind"] == "param" or k == "args"]
        (target.params if attrs["kind"] == "param" else target.ops).append(
            f"{_leaf_name(attrs)} {'; '.join(parts)}")


def _change_text(name: str, old: object, new: object) -> str:
    """One change of an op or a param: an op's arguments item by item, a shape as
    itself (``16×8 -> 32×8`` says what it is), anything else named (``requires_grad
    True -> False``, ``dtype float32 -> float16``)."""
    if name == "args":
        return items_change(old, new)
    word = "" if name == "shape" else f"{name} "
    return f"{word}{value_text(old)} -> {value_text(new)}"


def _note_line(name: str, note: _Notes) -> str:
    parts = list(note.own)
    parts += [", ".join(note.params)] if note.params else []
    parts += [f"ops {' '.join(_squeezed(note.ops))}"] if note.ops else []
    parts += [f"params {signed(note.delta)}"] if note.delta and (note.own or note.params) else []
    kind = f" {note.type}" if note.type else ""
    return f"changed {name}{kind}: " + "; ".join(parts)


def _squeezed(items: list[str]) -> list[str]:
    counts = Counter(items)
    return [item if counts[item] == 1 else f"{item} ×{counts[item]}" for item in counts]


def _interface(graph: nx.DiGraph) -> dict[tuple, tuple]:
    return {(a["role"], a.get("name")): (a["shape"], a["dtype"]) for _, a in graph.nodes(data=True)
            if a["kind"] == "tensor" and a["role"] in ("input", "output")}


def _interface_lines(diff: "GraphDiff") -> list[str]:
    """The model's inputs and outputs, compared by name: what callers of the model see."""
    old, new = _interface(diff.a), _interface(diff.b)
    lines = []
    for role, name in sorted(old.keys() | new.keys(), key=lambda k: (k[0], str(k[1]))):
        before, after = old.get((role, name)), new.get((role, name))
        if before == after:
            continue
        if before is None or after is None:
            verb, shape = ("added", after[0]) if before is None else ("removed", before[0])
            lines.append(f"model {role} {name!r} {verb} ({value_text(shape)})")
        else:
            lines.append(f"model {role} {name!r}: " + ", ".join(
                f"{value_text(x)} -> {value_text(y)}" for x, y in zip(before, after) if x != y))
    return lines


def _call_lines(diff: "GraphDiff", subtrees: tuple) -> tuple[list[str], list[str]]:
    """The lines of the calls changed in themselves, and the line of those whose shapes or
    counts only followed (said last, after the model's inputs and outputs)."""
    shared_counts = _shared_changes(diff)
    shared = {change for change, count in shared_counts.items() if count >= SHARED}
    lines = [_shared_line(change, shared_counts[change])
             for change in sorted(shared, key=lambda c: -shared_counts[c])]
    notes: dict[Optional[CallKey], _Notes] = defaultdict(_Notes)
    _layer_notes(diff, notes, shared)
    _loose_notes(diff, notes, subtrees)
    _changed_notes(diff, notes, shared)
    names = {key: (key[0] or diff.b.graph.get("model", "")) + (f"#{key[1]}" if key[1] else "")
             for key in notes if key is not None}
    names[None] = "the top level"
    primary = [(k, n) for k, n in notes.items() if n.own or n.params or n.ops]
    primary.sort(key=lambda item: -abs(item[1].delta))
    lines += [_note_line(names[key], note) for key, note in primary]
    consequences = [names[k] for k, n in notes.items() if n.secondary and not (n.params or n.ops)]
    if not consequences:
        return lines, []
    shown = ", ".join(consequences[:4]) + (", …" if len(consequences) > 4 else "")
    return lines, [f"shapes or parameter counts follow in {_plural(len(consequences), 'call')}: "
                   f"{shown}"]


def summarize(diff: "GraphDiff", *, max_lines: int = 12) -> str:
    """A headline, then up to ``max_lines`` lines, biggest structural changes first:
    subtrees added or removed (grouped under the call that holds them), attribute changes
    many calls share, calls changed in themselves (largest parameter change first), ops
    and params added, removed or changed, the model's inputs and outputs, and the calls
    whose shapes or counts changed only as a consequence.

    Raises:
        ValueError: ``max_lines`` is not a whole number >= 1.
    """
    if isinstance(max_lines, bool) or not isinstance(max_lines, int) or max_lines < 1:
        raise ValueError(f"max_lines must be a whole number >= 1, got {max_lines!r}")
    headline = _headline(diff)
    if not diff:
        return headline
    subtrees = (_calls(diff.b, diff.added), _calls(diff.a, diff.removed))
    whole = (_subtree_lines(diff.b, diff.added, subtrees[0], "added")
             + _subtree_lines(diff.a, diff.removed, subtrees[1], "removed"))
    body = [text for _, text in sorted(whole, key=lambda item: -item[0])]
    changed, followed = _call_lines(diff, subtrees)
    body += changed + _interface_lines(diff) + followed
    if len(body) > max_lines:
        rest = len(body) - max_lines + 1
        body = body[:max_lines - 1] + [f"… {rest} more lines: GraphDiff.added, .removed and "
                                       ".changed hold every node"]
    return "\n".join([headline, *(clip(_INDENT + line, WIDTH) for line in body)])
