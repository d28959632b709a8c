"""Costs on the graph: each layer call's inclusive FLOPs and saved bytes, and times in ms.

Nothing here imports torch: it works on any graph in the schema, saved ones included.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

__all__ = ["add_costs", "SUMMED"]

#: Op attributes a layer call sums over everything inside it.
SUMMED = ("flops", "backward_flops", "saved_bytes")
_NS_PER_MS = 1e6


def _ms(start: Any, end: Any) -> float:
    return max(0, end - start) / _NS_PER_MS


def add_costs(graph: nx.DiGraph) -> nx.DiGraph:
    """Add the cost attributes that follow from the recorded ones (schema "Costs"):
    inclusive :data:`SUMMED` on layer calls and their totals on the graph, ``forward_ms``
    and ``self_ms`` on ops and layers, ``backward_ms`` where a backward was timed, and
    ``output_bytes`` on layers from their outputs' ``bytes``. Returns ``graph``.

    >>> g = nx.DiGraph()
    >>> g.add_node("layer:#0", kind="layer", parent=None, t_start_ns=0, t_end_ns=4_000_000,
    ...            outputs=("tensor:0@v0",))
    >>> g.add_node("op:mm#0", kind="op", parent="layer:#0", t_start_ns=1_000_000,
    ...            t_end_ns=2_000_000, flops=48)
    >>> g.add_node("tensor:0@v0", kind="tensor", parent="layer:#0", bytes=32)
    >>> attrs = add_costs(g).nodes["layer:#0"]
    >>> attrs["flops"], attrs["forward_ms"], attrs["self_ms"], attrs["output_bytes"]
    (48, 4.0, 3.0, 32)
    >>> g.graph["flops"]
    48
    """
    nodes = graph.nodes
    _sum_up(graph)
    inner: dict[Any, float] = {}
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] not in ("layer", "op"):
            continue
        attrs["forward_ms"] = _ms(attrs["t_start_ns"], attrs["t_end_ns"])
        if "t_backward_start_ns" in attrs:
            attrs["backward_ms"] = _ms(attrs["t_backward_start_ns"], attrs["t_backward_end_ns"])
        if attrs["parent"] is not None:
            inner[attrs["parent"]] = inner.get(attrs["parent"], 0.0) + attrs["forward_ms"]
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] == "op":
            attrs["self_ms"] = attrs["forward_ms"]
        elif attrs["kind"] == "layer":
            attrs["self_ms"] = max(0.0, attrs["forward_ms"] - inner.get(node, 0.0))
            sizes = [nodes[t].get("bytes") for t in attrs.get("outputs", ()) if t in nodes]
            if sizes and all(size is not None for size in sizes):
                attrs["output_bytes"] = sum(sizes)
    return graph


def _sum_up(graph: nx.DiGraph) -> None:
    """Each op's :data:`SUMMED` values into every layer call around it, and the totals."""
    nodes = graph.nodes
    totals: dict[str, int] = {}
    recorded = {name for _, attrs in graph.nodes(data=True) if attrs["kind"] == "op"
                for name in SUMMED if name in attrs}
    for name in recorded:  # a recorded cost is there on every call, 0 where nothing ran
        for _, attrs in graph.nodes(data=True):
            if attrs["kind"] == "layer":
                attrs[name] = 0
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] != "op":
            continue
        for name in recorded:
            value = attrs.setdefault(name, 0)
            totals[name] = totals.get(name, 0) + value
            parent = attrs["parent"]
            while value and parent is not None:
                nodes[parent][name] += value
                parent = nodes[parent]["parent"]
    graph.graph.update(totals)
