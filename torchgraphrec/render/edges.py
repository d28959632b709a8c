"""The drawn edges: recorded edges lifted to what is drawn, hidden nodes bridged, one per dependency."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

import networkx as nx

__all__ = ["lift", "bridge", "settle_cluster_ends"]


def lift(edges: Iterable[tuple[str, str]], shown: Callable[[str], Optional[str]],
         stand_in: Callable[[str], str], drawn: Iterable[str]) -> nx.DiGraph:
    """The edges between drawn nodes: each end becomes what draws it (``shown``); an end
    that is not drawn becomes its ``stand_in`` and is bridged afterwards.

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
            lifted.add_edge(ends[0], ends[1])
    bridge(lifted, hidden)
    return lifted


def bridge(graph: nx.DiGraph, hidden: set) -> None:
    """Remove hidden nodes, joining each one's predecessors to its successors.

    >>> g = nx.DiGraph([("a", "h"), ("h", "b")])
    >>> bridge(g, {"h"}); sorted(g.edges)
    [('a', 'b')]
    """
    for node in [n for n in nx.topological_sort(graph) if n in hidden]:
        for source in list(graph.predecessors(node)):
            for target in list(graph.successors(node)):
                if source != target:
                    graph.add_edge(source, target)
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
