"""The benchmark's floors do the recorder's job: ``floor:graph`` the same ops, reading the
same ops, params and inputs, on the same forward; ``floor:schema`` the recorder's own graph
(else neither would be a floor for it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import torch

import models
import torchgraphrec as tgr
from torchgraphrec._torch import GLOBAL_FORWARD_HOOKS_TAKE_KWARGS

_SPEC = importlib.util.spec_from_file_location(
    "floorgraph", Path(__file__).parents[1] / "benchmarks" / "floorgraph.py")
floorgraph = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(floorgraph)
sys.modules["floorgraph"] = floorgraph  # floorschema imports it as the benchmark does
_SPEC = importlib.util.spec_from_file_location(
    "floorschema", Path(__file__).parents[1] / "benchmarks" / "floorschema.py")
floorschema = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(floorschema)

# the floors' global post-hooks take the call's keyword arguments, as the recorder's do
# where torch allows it (the benchmark runs on the pinned torch)
pytestmark = pytest.mark.skipif(not GLOBAL_FORWARD_HOOKS_TAKE_KWARGS,
                                reason="global forward hooks take no keyword arguments here")


def op_reads(graph: nx.DiGraph) -> list[tuple[str, list[Any]]]:
    """Each op in the order it ran, with what it read: earlier ops by their place in that
    order, params by name, other values by shape (a tensor node by the op that made it)."""
    # the recorder's ops in the order of their ``seq``, the floor's in that of their ids
    ops = sorted((node for node, kind in graph.nodes(data="kind") if kind == "op"),
                 key=lambda node: graph.nodes[node].get("seq", node))
    place = {node: index for index, node in enumerate(ops)}

    def source(node: Any) -> Any:
        attrs = graph.nodes[node]
        if attrs["kind"] == "op":
            return place[node]
        if attrs["kind"] == "param":
            return attrs["label"]
        made_by = list(graph.predecessors(node))
        return source(made_by[0]) if made_by else tuple(attrs["shape"])

    return [(graph.nodes[op]["label"], sorted(map(repr, map(source, graph.predecessors(op)))))
            for op in ops]


def _beside(floor: Any, case: Any, grad: bool) -> tuple[nx.DiGraph, nx.DiGraph]:
    """The floor's graph and the recorder's of one forward of ``case``'s model in eval mode."""
    model = case.model.eval()
    with torch.set_grad_enabled(grad):
        return (floor(model, case.args, case.kwargs)(),
                tgr.record(model, case.args, case.kwargs).graph)


@pytest.mark.parametrize("make", [models.mlp, models.resnet_like, models.gpt2],
                         ids=["mlp", "resnet_like", "gpt2"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_the_floor_records_what_the_recorder_records(make: Any, grad: bool) -> None:
    floor, recorded = _beside(floorgraph.floor_graph, make(), grad)
    assert floorgraph.graph_counts(floor) == floorgraph.graph_counts(recorded)
    # the floor labels an op by its function's name, the recorder by its own op names
    reads = [sources for _, sources in op_reads(floor)]
    assert reads == [sources for _, sources in op_reads(recorded)]
    assert len(reads) > 2 and any(reads)


def test_the_floor_sees_a_change_in_place_and_no_op_in_an_argument_handed_back() -> None:
    class Block(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 2
            y.add_(1)  # y's producer is now add_
            return y.to(y.dtype) + x  # to() hands y back: no op

    floor = floorgraph.floor_graph(Block(), (torch.ones(3),), {})()
    reads = dict(op_reads(floor))
    assert [label for label, _ in op_reads(floor)] == ["mul", "add_", "add"]
    assert reads["add"] == ["(3,)", "1"]  # the input and add_'s result


def test_the_floor_records_ops_returning_named_tuples() -> None:
    class Block(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.max(x * 2, 1).values + 1  # torch.return_types.max

    floor = floorgraph.floor_graph(Block(), (torch.ones(2, 3),), {})()
    recorded = tgr.record(Block(), torch.ones(2, 3)).graph
    assert [label for label, _ in op_reads(floor)][:2] == ["mul", "max"]
    assert [reads for _, reads in op_reads(floor)] == [reads for _, reads in op_reads(recorded)]


def _without_times(graph: nx.DiGraph) -> tuple[dict, dict]:
    times = {"t_start_ns", "t_end_ns", "t_ns"}
    nodes = {node: {k: v for k, v in attrs.items() if k not in times}
             for node, attrs in graph.nodes(data=True)}
    edges = {(u, v): {k: v for k, v in attrs.items() if k not in times}
             for u, v, attrs in graph.edges(data=True)}
    return nodes, edges


def _required(graph: nx.DiGraph) -> tuple[dict, dict]:
    """Every node's and edge's attributes the schema requires (and a tensor's name), by id."""
    from torchgraphrec.schema import COMMON_NODE_ATTRS, EDGE_ATTRS, NODE_ATTRS

    nodes, edges = _without_times(graph)
    kept = {kind: {*COMMON_NODE_ATTRS, *attrs, "name"} for kind, attrs in NODE_ATTRS.items()}
    return ({node: {k: v for k, v in attrs.items() if k in kept[attrs["kind"]]}
             for node, attrs in nodes.items()},
            {edge: {k: v for k, v in attrs.items() if k in EDGE_ATTRS}
             for edge, attrs in edges.items()})


@pytest.mark.parametrize("make", [models.mlp, models.resnet_like, models.gpt2],
                         ids=["mlp", "resnet_like", "gpt2"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_the_schema_floor_returns_the_recorders_graph(make: Any, grad: bool) -> None:
    floor, recorded = _beside(floorschema.floor_schema, make(), grad)
    tgr.validate(floor)
    floor_nodes, floor_edges = _required(floor)
    nodes, edges = _required(recorded)
    assert floor_nodes == nodes  # ids, kinds, parents, shapes, seq: all but the times
    assert floor_edges == edges
    assert len(nodes) > 10 and any(a.get("role") == "output" for a in nodes.values())
    # what it leaves out: the optional attributes (costs, bytes), nothing else
    optional = {k for attrs in _without_times(recorded)[0].values() for k in attrs} - \
        {k for attrs in floor_nodes.values() for k in attrs}
    assert optional <= {"bytes", "param_bytes", "trainable_params", "output_bytes",
                        "forward_ms", "self_ms", "saved_bytes"}


def test_a_target_is_set_beside_each_floor_the_run_measured() -> None:
    spec = importlib.util.spec_from_file_location(
        "capture_bench", Path(__file__).parents[1] / "benchmarks" / "capture.py")
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)
    ok = {"status": "ok"}
    results = {("gpt2_small", "grad", "floor:schema"): {**ok, "ratio": 1.25},
               ("gpt2_small", "grad", "floor:graph"): {**ok, "ratio": 1.15},
               ("gpt2_small", "grad", "floor:schema+saved"): {**ok, "ratio": 1.5},
               ("gpt2_small", "no_grad", "floor:schema"): {"status": "FAIL", "ratio": 1.0}}
    note = capture._floor_note(results, "gpt2_small", "grad", "torchgraphrec", 1.2)
    assert note == ("; floor:graph 1.15x: the target is above it"
                    "; floor:schema 1.25x: the target is below it")
    assert capture._floor_note(results, "gpt2_small", "no_grad", "torchgraphrec", 1.15) == ""
    assert capture._floor_note(results, "gpt2_small", "grad", "torchviz", 1.2) == ""
