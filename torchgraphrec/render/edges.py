"""The drawn edges: recorded edges lifted to what is drawn, hidden nodes bridged, one per dependency."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

import networkx as nx

from torchgraphrec.render.oproles import stronger

__all__ = ["lift", "bridge", "settle_cluster_ends", "shared_inputs", "MAX_FANOUT"]

#: A drawn node feeding more nodes than this (rotary cos/sin, a mask, position ids used by
#: every block) keeps one edge; every other node it feeds gets a small named marker.
MAX_FANOUT = 8


def lift(edges: Iterable[tuple[str, str]], shown: Callable[[str], Optional[str]],
         stand_in: Callable[[str], str], drawn: Iterable[str],
         labels: Mapping[tuple[str, str], str] = {},
         via: Callable[[str], str] = lambda node: "") -> nx.DiGraph:
    """The edges between drawn nodes: each end becomes what draws it (``shown``); an end
    that is not drawn becomes its ``stand_in`` and is bridged afterwards.

    An edge's ``label`` is the strongest (see :func:`~torchgraphrec.render.oproles.stronger`)
    of the ``labels`` of the recorded edges it stands for and the ``via`` labels of the
    hidden nodes it bridges (a chain of layout ops: ``reshape``).

    >>> lifted = lift([("a", "x"), ("x", "b")], lambda n: None if n == "x" else n,
    ...               lambda n: n, ["a", "b"])
    >>> sorted(lifted.edges)
    [('a', 'b')]
    """
    lifted = nx.DiGraph()
    lifted.add_nodes_from(drawn)
    hidden = set()
    for source, target in edges:
        ends = []
        for node in (source, target):
            visible = shown(node)
            if visible is None:
                visible = stand_in(node)
                hidden.add(visible)
            ends.append(visible)
        if ends[0] != ends[1]:
            _add(lifted, ends[0], ends[1], labels.get((source, target), ""))
    bridge(lifted, hidden, via)
    return lifted


def _add(graph: nx.DiGraph, source: Any, target: Any, label: str) -> None:
    """Add an edge, or keep the stronger label where it is there already."""
    if graph.has_edge(source, target):
        label = stronger(graph.edges[source, target]["label"], label)
    graph.add_edge(source, target, label=label)


def bridge(graph: nx.DiGraph, hidden: set, via: Callable[[Any], str] = lambda node: "") -> None:
    """Remove hidden nodes, joining each one's predecessors to its successors; the new edges
    keep the strongest label of the two they join and ``via(node)``.

    Lifting to what is drawn can close a cycle (two calls that each feed the other, as drawn);
    the hidden nodes are then bridged in any order, which keeps every path all the same.

    >>> g = nx.DiGraph([("a", "h"), ("h", "b")])
    >>> bridge(g, {"h"}, lambda node: "reshape"); list(g.edges(data="label"))
    [('a', 'b', 'reshape')]
    >>> g = nx.DiGraph([("a", "h"), ("h", "b"), ("b", "a")])
    >>> bridge(g, {"h"}); sorted(g.edges)
    [('a', 'b'), ('b', 'a')]
    """
    try:
        order = [n for n in nx.topological_sort(graph) if n in hidden]
    except nx.NetworkXUnfeasible:
        order = [n for n in graph if n in hidden]
    for node in order:
        own = via(node)
        for source, _, before in list(graph.in_edges(node, data="label", default="")):
            for _, target, after in list(graph.out_edges(node, data="label", default="")):
                if source != target:
                    _add(graph, source, target, stronger(after, before, own))
        graph.remove_node(node)


def settle_cluster_ends(graph: nx.DiGraph, inside: Mapping[str, set[str]]) -> None:
    """Drop edges at a cluster that a node drawn inside it already carries.

    Without ops (``ops="none"``) edges touch the module calls themselves, the outer ones
    too: an edge into a cluster is dropped where something inside it receives the same
    tensor, or where it comes from inside; the rest are drawn to the cluster's border.

    >>> g = nx.DiGraph([("t", "outer"), ("t", "inner"), ("u", "outer")])
    >>> settle_cluster_ends(g, {"outer": {"inner"}}); sorted(g.edges)
    [('t', 'inner'), ('u', 'outer')]
    """
    for source, target in list(graph.edges):
        if source in inside and _carried(target, inside[source], graph.predecessors):
            graph.remove_edge(source, target)
        elif target in inside and _carried(source, inside[target], graph.successors):
            graph.remove_edge(source, target)


def _carried(other: Any, members: set[str], neighbours: Callable[[Any], Iterable[Any]]) -> bool:
    return other in members or any(node in members for node in neighbours(other))


def shared_inputs(edges: list[tuple[str, str]], limit: int = MAX_FANOUT) -> list[tuple[str, str]]:
    """The edges drawn as markers: those out of a node that feeds more than ``limit`` nodes,
    all but its first (the page stays a column instead of ``limit`` edges across it).

    >>> shared_inputs([("rope", f"block{i}") for i in range(4)], limit=2)
    [('rope', 'block1'), ('rope', 'block2'), ('rope', 'block3')]
    """
    targets: dict[str, list[str]] = {}
    for source, target in edges:
        targets.setdefault(source, []).append(target)
    return [(source, target) for source, target in edges
            if len(targets[source]) > limit and target != targets[source][0]]
