"""add_costs: what follows from the recorded costs, on graphs written out by hand."""

from __future__ import annotations

import networkx as nx

from torchgraphrec.costs import add_costs


def _forward(graph: nx.DiGraph, index: int, **costs: int) -> None:
    """A forward of one call holding one op, its costs as given."""
    root, op = f"layer:#{index}", f"op:mm#{index}"
    graph.add_node(root, kind="layer", parent=None, t_start_ns=0, t_end_ns=4, outputs=())
    graph.add_node(op, kind="op", parent=root, t_start_ns=1, t_end_ns=2, **costs)


def test_a_forward_that_did_not_count_a_cost_carries_none_of_it() -> None:
    graph = nx.DiGraph()
    _forward(graph, 0, flops=48)  # under no_grad: FLOPs counted, saved bytes not
    _forward(graph, 1, flops=48, saved_bytes=32)
    graph.add_node("op:all_reduce#b0", kind="op", parent=None, t_start_ns=5, t_end_ns=6)
    add_costs(graph)
    assert "saved_bytes" not in graph.nodes["layer:#0"]
    assert "saved_bytes" not in graph.nodes["op:mm#0"]
    assert graph.nodes["layer:#1"]["saved_bytes"] == 32
    assert [graph.nodes[n]["flops"] for n in ("layer:#0", "layer:#1")] == [48, 48]
    # an op outside every call reads 0 of what it has no value of
    assert graph.nodes["op:all_reduce#b0"]["saved_bytes"] == 0
    assert graph.graph["flops"] == 96 and graph.graph["saved_bytes"] == 32
