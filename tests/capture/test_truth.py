"""The graph against an independent observer: a path joins two calls exactly when data flowed."""

from __future__ import annotations

import contextlib

import networkx as nx
import pytest
import torch

import torchgraphrec as tgr
from helpers import fresh
from models import ZOO, Case
from tests.capture.truth import DataFlowTracer, leaf_calls

MODES = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "frozen": contextlib.nullcontext,
}


def _observed(case, mode: str) -> dict:
    tracer = DataFlowTracer(case.model)
    try:
        with MODES[mode](), tracer:
            case.model(*case.args, **case.kwargs)
    finally:
        tracer.remove()
    return tracer.received


def _differences(graph: nx.DiGraph, calls: dict, received: dict) -> list[tuple]:
    """The ordered pairs of leaf calls on which the graph and the observer disagree."""
    wrong = []
    for source, attrs in calls.items():
        reach = set(attrs["outputs"]).union(*(nx.descendants(graph, t) for t in attrs["outputs"]))
        for target, other in calls.items():
            if target == source:
                continue
            recorded = not reach.isdisjoint(other["inputs"])
            if recorded != (source in received[target]):
                wrong.append((source, target, "recorded" if recorded else "missing"))
    return wrong


def _recorded_and_observed(name: str, mode: str) -> tuple[nx.DiGraph, dict, dict]:
    case = fresh(name)
    if mode == "frozen":
        case.model.requires_grad_(False)
    with MODES[mode]():
        graph = tgr.record(case.model, case.args, case.kwargs).graph
    received = _observed(case, mode)
    return graph, leaf_calls(graph, case.model), received


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(ZOO))
def test_a_path_joins_two_leaf_calls_exactly_when_one_fed_the_other(name: str, mode: str) -> None:
    graph, calls, received = _recorded_and_observed(name, mode)
    assert set(calls) == set(received)  # the same calls on both sides
    wrong = _differences(graph, calls, received)
    assert not wrong, f"{len(wrong)} pairs differ, e.g. {wrong[:5]}"


@pytest.mark.parametrize("name", ["resnet_like", "gpt2", "bert"])
def test_the_comparison_catches_a_missing_and_a_made_up_edge(name: str) -> None:
    graph, calls, received = _recorded_and_observed(name, "grad")
    pairs = [(a, b) for a in calls for b in calls if a != b]
    assert any(a in received[b] for a, b in pairs) and any(a not in received[b] for a, b in pairs)
    fed = next(b for a, b in pairs if a in received[b]  # through ops, not the same node
               and set(calls[a]["outputs"]).isdisjoint(calls[b]["inputs"]))
    cut = graph.copy()
    cut.remove_edges_from([edge for node in calls[fed]["inputs"] for edge in graph.in_edges(node)])
    assert any(kind == "missing" for *_, kind in _differences(cut, calls, received))
    source, target = next((a, b) for a, b in pairs if a not in received[b]
                          and calls[a]["outputs"] and calls[b]["inputs"])
    made_up = graph.copy()
    made_up.add_edge(calls[source]["outputs"][0], calls[target]["inputs"][0])
    assert (source, target, "recorded") in _differences(made_up, calls, received)


class _Pooled(torch.nn.Module):
    """A linear layer, then adaptive average pooling over a transposed view (which restrides
    its input in place, with ``as_strided_``), then another linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.pool = torch.nn.AdaptiveAvgPool1d(1)
        self.last = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.flatten(self.pool(self.first(x).transpose(1, 2)), 1))


@pytest.mark.parametrize("mode", list(MODES))
def test_the_observer_follows_a_tensor_restrided_in_place(mode: str) -> None:
    # the observer keys provenance by memory, strides included: it lost what the pooling's
    # as_strided_ read, and took the recorder's true path from `first` to `last` for made up
    torch.manual_seed(0)
    case = Case(_Pooled(), (torch.randn(2, 3, 4),), {})
    if mode == "frozen":
        case.model.requires_grad_(False)
    received = _observed(case, mode)
    assert received[("last", 0)] == {("first", 0), ("pool", 0)}
    with MODES[mode]():
        graph = tgr.record(case.model, case.args, case.kwargs).graph
    assert not _differences(graph, leaf_calls(graph, case.model), received)
