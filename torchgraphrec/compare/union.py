"""The union of two compared recordings: one graph in the schema, each node marked by status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import networkx as nx

from torchgraphrec.compare.status import mark_statuses

if TYPE_CHECKING:
    from torchgraphrec.compare.core import GraphDiff

__all__ = ["STATUSES", "union_graph"]

#: The values of the ``diff`` attribute on the union's nodes and edges.
STATUSES = ("same", "added", "removed", "changed")


def _union_ids(diff: "GraphDiff") -> dict[str, str]:
    """Where each node of ``a`` lands: its match in ``b``, or its own id (suffixed ``~a``
    where ``b`` uses that id for something else)."""
    ids = dict(diff.matches)
    taken = set(diff.b.nodes)
    for node in sorted(diff.removed, key=lambda n: diff.a.nodes[n]["seq"]):
        name = node
        while name in taken:
            name += "~a"
        taken.add(name)
        ids[node] = name
    return ids


def _mapped(ids: dict[str, str], nodes: Iterable[str]) -> tuple:
    return tuple(ids.get(node, node) for node in nodes)


def _removed_attrs(attrs: dict, ids: dict[str, str]) -> dict:
    moved = {**attrs, "diff": "removed"}
    if attrs["parent"] is not None:
        moved["parent"] = ids[attrs["parent"]]
    for side in ("inputs", "outputs"):
        if side in attrs:
            moved[side] = _mapped(ids, attrs[side])
    return moved


def _fix_depths(graph: nx.DiGraph) -> None:
    # A removed call hangs under a call of ``b``, whose depth may differ from the one it
    # had in ``a``: depth follows the union's own parents.
    memo: dict[Optional[str], int] = {None: -1}

    def depth(node: str) -> int:
        chain, up = [], node
        while up not in memo:
            chain.append(up)
            up = graph.nodes[up]["parent"]
        for link in reversed(chain):
            memo[link] = memo[graph.nodes[link]["parent"]] + 1
        return memo[node]

    for node in graph.nodes:
        graph.nodes[node]["depth"] = depth(node)


def _boundary_changes(diff: "GraphDiff", ids: dict[str, str], a_node: str,
                      b_node: str) -> dict[str, tuple]:
    """A changed call's ``inputs`` and ``outputs`` as ``(in a, in b)`` union ids, where
    their shapes or dtypes changed and ``a`` had other tensors there (ones ``b`` lacks):
    so that the old side is drawn with its own tensors, not ``b``'s."""
    found, changes = {}, diff.changed[b_node]
    for side in ("inputs", "outputs"):
        if not {f"{side[:-1]}_shapes", f"{side[:-1]}_dtypes"} & set(changes):
            continue  # alike on both sides: the drawing of either reads the same
        old = _mapped(ids, diff.a.nodes[a_node].get(side, ()))
        new = tuple(diff.b.nodes[b_node].get(side, ()))
        if old != new:
            found[side] = (old, new)
    return found


def _add_nodes(graph: nx.DiGraph, diff: "GraphDiff", ids: dict[str, str]) -> None:
    back = {node_b: node_a for node_a, node_b in diff.matches.items()}
    for node, attrs in diff.b.nodes(data=True):
        status = ("added" if node in diff.added else
                  "changed" if node in diff.changed else "same")
        graph.add_node(node, **attrs, diff=status)
        if status == "changed":
            graph.nodes[node]["diff_changes"] = dict(diff.changed[node])
            if attrs["kind"] == "layer":
                graph.nodes[node]["diff_changes"].update(
                    _boundary_changes(diff, ids, back[node], node))
    for node in sorted(diff.removed, key=lambda n: diff.a.nodes[n]["seq"]):
        graph.add_node(ids[node], **_removed_attrs(diff.a.nodes[node], ids))
    _fix_depths(graph)


def _add_edges(graph: nx.DiGraph, diff: "GraphDiff", ids: dict[str, str]) -> None:
    for source, target, attrs in diff.b.edges(data=True):
        added = (source, target) in diff.edges_added or {source, target} & diff.added
        graph.add_edge(source, target, **attrs, diff="added" if added else "same")
    for source, target, attrs in diff.a.edges(data=True):
        if not graph.has_edge(ids[source], ids[target]):
            graph.add_edge(ids[source], ids[target], **attrs, diff="removed")


def _layer_of(graph: nx.DiGraph, node: str) -> Optional[str]:
    return node if graph.nodes[node]["kind"] == "layer" else graph.nodes[node]["parent"]


def _common_call(graph: nx.DiGraph, source: str, target: str) -> Optional[str]:
    """The innermost call holding both ends of an edge: where a rewiring was written."""
    holders, up = set(), _layer_of(graph, source)
    while up is not None:
        holders.add(up)
        up = graph.nodes[up]["parent"]
    up = _layer_of(graph, target)
    while up is not None and up not in holders:
        up = graph.nodes[up]["parent"]
    return up


def _mark_inside(graph: nx.DiGraph, diff: "GraphDiff", ids: dict[str, str]) -> None:
    """``diff_inside`` on every layer: whether anything in its subtree differs. A node
    added, removed or changed marks its calls; an edge rewired between matched nodes marks
    the calls holding both its ends (edges to added or removed nodes mark nothing more)."""
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] == "layer":
            attrs["diff_inside"] = False
    touched = [_layer_of(graph, n) for n, a in graph.nodes(data=True) if a["diff"] != "same"]
    rewired = [*diff.edges_added, *((ids[s], ids[t]) for s, t in diff.edges_removed)]
    touched += [_common_call(graph, source, target) for source, target in rewired]
    for node in touched:
        while node is not None and not graph.nodes[node]["diff_inside"]:
            graph.nodes[node]["diff_inside"] = True
            node = graph.nodes[node]["parent"]


def union_graph(diff: "GraphDiff") -> nx.DiGraph:
    """Every node and edge of ``b``, and those of ``a`` that ``b`` lacks, in the schema.

    Nodes and edges carry ``diff`` (one of :data:`STATUSES`); changed nodes carry
    ``diff_changes`` (``{attribute: (old, new)}``; a call's ``inputs`` and ``outputs``
    there too, as union ids, where ``a``'s were other nodes of other shapes); every layer
    carries ``diff_inside`` (whether it or anything under it differs, so that a drawing at
    any depth shows where to look), and each node the status its drawings style (see
    :func:`~torchgraphrec.compare.status.mark_statuses`). Nodes of ``b`` keep their ids; removed
    nodes keep their id in ``a``, with ``~a`` appended where ``b`` uses it already. The
    graph attributes are ``b``'s, with ``diff_a_model`` (``a``'s ``model``).
    """
    ids = _union_ids(diff)
    graph = nx.DiGraph(**diff.b.graph, diff_a_model=diff.a.graph.get("model", ""))
    _add_nodes(graph, diff, ids)
    _add_edges(graph, diff, ids)
    _mark_inside(graph, diff, ids)
    mark_statuses(graph)
    return graph
