"""Pass-through calls (Identity, eval-mode Dropout) put back on the path of the tensor they return.

A call that returns a tensor it received makes no new tensor and often runs no op, so the
recorded graph has no edge through it: drawn as it is, the call floats beside the flow. For
the drawing, the tensor flows into the call, and what used the tensor after the call ended
takes it from the call.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from torchgraphrec.graph import calls_around
from torchgraphrec.schema import EdgeKind, NodeKind, TensorRole

__all__ = ["pass_through_calls", "wire_pass_through"]


def pass_through_calls(graph: nx.DiGraph) -> dict[str, list[str]]:
    """Each tensor returned unchanged by a call, with those calls (the innermost ones, in
    the order they ran).

    >>> g = nx.DiGraph()
    >>> g.add_node("t", kind="tensor", parent=None)
    >>> g.add_node("layer:id#0", kind="layer", parent=None, inputs=("t",), outputs=("t",),
    ...            t_start_ns=0, t_end_ns=1)
    >>> pass_through_calls(g)
    {'t': ['layer:id#0']}
    """
    found: dict[str, list[str]] = {}
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] != NodeKind.LAYER.value:
            continue
        for tensor in sorted(set(attrs["inputs"]) & set(attrs["outputs"])):
            if tensor in graph:
                found.setdefault(tensor, []).append(node)
    return {tensor: _innermost(graph, calls) for tensor, calls in found.items()}


def _innermost(graph: nx.DiGraph, calls: list[str]) -> list[str]:
    """``calls`` without those that enclose another of them (the inner one is drawn, or
    the edge is lifted to the outer one anyway), in the order they started."""
    enclosing = {ancestor for call in calls for ancestor in calls_around(graph, call)}
    inner = [call for call in calls if call not in enclosing]
    return sorted(inner, key=lambda call: graph.nodes[call]["t_start_ns"])


def _edge(graph: nx.DiGraph, source: str, target: str, like: dict[str, Any]) -> None:
    if not graph.has_edge(source, target) and not nx.has_path(graph, target, source):
        graph.add_edge(source, target, **{**like, "kind": EdgeKind.FLOW.value})


def _wire(graph: nx.DiGraph, tensor: str, calls: list[str]) -> None:
    """Route ``tensor`` through ``calls`` in turn: each later use takes it from the last
    call that had ended when it was used. Where ``tensor`` is itself one of the model's
    outputs, which the model returned after every call, its makers feed the first call
    and the last call feeds it."""
    ends = [graph.nodes[call]["t_end_ns"] for call in calls]
    uses = [(target, attrs) for _, target, attrs in graph.out_edges(tensor, data=True)
            if target not in calls]
    holders = [tensor]
    makers = list(graph.in_edges(tensor, data=True))
    if graph.nodes[tensor].get("role") == TensorRole.OUTPUT.value and makers:
        graph.remove_edges_from([(source, tensor) for source, _, _ in makers])
        holders = [source for source, _, _ in makers]
        _edge(graph, calls[-1], tensor, {**makers[0][2], "t_ns": ends[-1]})
        # it stands outside the model, as every output is drawn: left in the call that made
        # it, a cut that closes that call would feed the call back from the pass-through
        graph.nodes[tensor].update(parent=None, depth=0)
    for call in calls:
        start = graph.nodes[call]
        for holder in holders:
            _edge(graph, holder, call, {"seq": start["seq"], "t_ns": start["t_start_ns"]})
        holders = [call]
    for target, attrs in uses:
        later = [call for call, end in zip(calls, ends) if end <= attrs["t_ns"]]
        if later:
            graph.remove_edge(tensor, target)
            _edge(graph, later[-1], target, attrs)


def wire_pass_through(graph: nx.DiGraph) -> nx.DiGraph:
    """``graph`` with every pass-through call on its tensor's path (a copy where any is
    found, else ``graph`` itself).

    >>> g = nx.DiGraph()
    >>> g.add_node("t", kind="tensor", parent=None)
    >>> g.add_node("layer:id#0", kind="layer", parent=None, inputs=("t",), outputs=("t",),
    ...            t_start_ns=1, t_end_ns=2, seq=1)
    >>> g.add_node("op:relu#0", kind="op", parent=None)
    >>> g.add_edge("t", "op:relu#0", kind="flow", seq=2, t_ns=3)
    >>> sorted(wire_pass_through(g).edges)
    [('layer:id#0', 'op:relu#0'), ('t', 'layer:id#0')]
    """
    found = pass_through_calls(graph)
    if not found:
        return graph
    wired = graph.copy()
    for tensor, calls in sorted(found.items()):
        _wire(wired, tensor, calls)
    return wired
