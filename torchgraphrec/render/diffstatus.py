"""What a diff's union says about each drawn element: changed in itself, under it, behind an edge."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Mapping, Optional

import networkx as nx

from torchgraphrec.render.view import View

__all__ = ["changed_itself", "own_changes", "inside_counts", "param_changes", "mode_change",
           "edge_statuses"]

#: What makes a node changed in itself, not only in what follows from a change elsewhere
#: (the shapes reaching it; for a call also its parameter count, and its ``training``
#: flag: a mode the whole model is run in, not its architecture).
_OWN = {"layer": frozenset({"type", "settings"}), "op": frozenset({"name", "args"}),
        "tensor": frozenset({"name", "role", "nested"}),
        "param": frozenset({"shape", "dtype", "requires_grad", "buffer"})}


def changed_itself(attrs: Mapping) -> bool:
    """Whether a changed node changed in itself, not only in what follows from elsewhere.

    >>> changed_itself({"kind": "op", "diff_changes": {"shape": ((2,), (3,))}})
    False
    >>> changed_itself({"kind": "layer", "diff_changes": {"type": ("ReLU", "GELU")}})
    True
    """
    return bool(_OWN[attrs["kind"]] & set(attrs.get("diff_changes") or ()))


def own_changes(attrs: Mapping) -> dict[str, tuple]:
    """The changes of a node that it made itself."""
    return {k: v for k, v in (attrs.get("diff_changes") or {}).items() if k in _OWN[attrs["kind"]]}


def inside_counts(graph: nx.DiGraph) -> dict[str, Counter]:
    """For every call, how many calls, ops and params under it were added, removed or
    changed in themselves, as ``{(status, kind): count}``."""
    counts: dict[str, Counter] = {}
    for _, attrs in graph.nodes(data=True):
        status = attrs.get("diff", "same")
        if status == "same" or attrs["kind"] == "tensor":
            continue
        if status == "changed" and not changed_itself(attrs):
            continue
        parent = attrs["parent"]
        while parent is not None:
            counts.setdefault(parent, Counter())[status, attrs["kind"]] += 1
            parent = graph.nodes[parent]["parent"]
    return counts


def param_changes(graph: nx.DiGraph) -> dict[str, list[tuple[str, Mapping[str, tuple]]]]:
    """The changed parameters under each call: leaf name and changes, in order."""
    found: dict[str, list] = {}
    params = [(a["seq"], a) for _, a in graph.nodes(data=True)
              if a["kind"] == "param" and a.get("diff") == "changed"]
    for _, attrs in sorted(params, key=lambda item: item[0]):
        leaf = attrs["qualname"].rpartition(".")[2]
        found.setdefault(attrs["parent"], []).append((leaf, attrs["diff_changes"]))
    return found


def mode_change(graph: nx.DiGraph) -> Optional[tuple]:
    """``(old, new)`` where every call both sides have changed its ``training`` flag the
    same way (train against eval), said once for the drawing; else ``None``."""
    found = {(a.get("diff_changes") or {}).get("training") for _, a in graph.nodes(data=True)
             if a["kind"] == "layer" and a.get("diff") in ("same", "changed")}
    return found.pop() if len(found) == 1 and None not in found else None


def edge_statuses(view: View) -> dict[tuple[str, str], set[str]]:
    """The statuses of the recorded edges each drawn edge stands for, by its two ends."""
    graph, drawn_as = view.folded, view.drawn_as
    drawn = {*view.nodes, *view.clusters}
    found: dict[tuple[str, str], set[str]] = {}
    for source, target, status in graph.edges(data="diff", default="same"):
        if status == "same":  # most edges: only where drawn as they are
            ends = [{drawn_as.get(source)}, {drawn_as.get(target)}]
        else:
            ends = [_drawn(view, drawn, source, graph.predecessors),
                    _drawn(view, drawn, target, graph.successors)]
        for tail in ends[0]:
            for head in ends[1]:
                if tail != head and tail is not None and head is not None:
                    found.setdefault((tail, head), set()).add(status)
    return found


def _drawn(view: View, drawn: set[str], node: str,
           neighbours: Callable[[str], Iterable[str]]) -> set[str]:
    """What draws ``node``; where it is bridged over, what draws the nearest nodes on that
    side of what stands for it (as the drawn edge was bridged)."""
    found: set[str] = set()
    stack = [view.drawn_as[node]] if node in view.drawn_as else []
    seen = set(stack)
    while stack:
        current = stack.pop()
        if current in drawn:
            found.add(current)
            continue
        fresh = [view.drawn_as.get(n, n) for n in neighbours(current)]
        fresh = [n for n in fresh if n not in seen]
        seen.update(fresh)
        stack += fresh
    return found
