"""Each node's status in a diff's union, as a drawing shows it: computed once, here; render/ styles it."""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Optional

import networkx as nx

__all__ = ["changed_itself", "own_changes", "inside_counts", "param_changes", "mode_change",
           "mark_statuses"]

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


def own_changes(attrs: Mapping) -> list[str]:
    """The names of the changes a node made itself, in the order they were found.

    >>> own_changes({"kind": "op", "diff_changes": {"shape": ((2,), (3,)), "args": ("a", "b")}})
    ['args']
    """
    return [k for k in (attrs.get("diff_changes") or {}) if k in _OWN[attrs["kind"]]]


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


def _status(attrs: Mapping, inside: bool, params: bool, as_box: bool, mode: Optional[tuple]) -> str:
    """The status a node is drawn with: a box also changes by what changed inside it (its
    parameters, calls and ops), a cluster shows those itself."""
    status = attrs.get("diff", "same")
    if status in ("added", "removed"):
        return status
    if (status == "changed" and changed_itself(attrs)) or (as_box and (inside or params)):
        return "changed"
    more = mode is None or any(name != "training" for name in attrs.get("diff_changes") or {})
    if inside or (status == "changed" and more) or (status == "same" and attrs.get("diff_inside")):
        return "inside"
    return "same"  # a call whose only change is the drawing's mode change


def mark_statuses(graph: nx.DiGraph) -> None:
    """Write on ``graph`` (a diff's union) what its drawings style: ``diff_status`` on
    every node (drawn as a node or an open cluster), ``diff_box_status`` on every call
    (drawn as one box), ``diff_own`` (the changes a node made itself), ``diff_counts``
    (``"added layer"``: how many under a call) and ``diff_params`` (its changed
    parameters: leaf name and changes), and the graph's ``diff_mode`` (``(old, new)``
    where every call changed its ``training`` flag the same way)."""
    counts, params, mode = inside_counts(graph), param_changes(graph), mode_change(graph)
    if mode is not None:
        graph.graph["diff_mode"] = mode
    for node, attrs in graph.nodes(data=True):
        inside, own_params = bool(counts.get(node)), bool(params.get(node))
        attrs["diff_status"] = _status(attrs, inside, own_params, False, mode)
        if attrs.get("diff") == "changed":
            attrs["diff_own"] = own_changes(attrs)
        if attrs["kind"] != "layer":
            continue
        attrs["diff_box_status"] = _status(attrs, inside, own_params, True, mode)
        if inside:
            attrs["diff_counts"] = {f"{s} {k}": n for (s, k), n in sorted(counts[node].items())}
        if own_params:
            attrs["diff_params"] = params[node]
