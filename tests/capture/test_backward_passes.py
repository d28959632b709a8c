"""Backward passes the user runs in other ways than one ``loss.backward()``: several through
one graph, a gradient penalty's pass through a ``create_graph`` gradient, a loss term the
forward keeps instead of returning; against wall clocks and ``FlopCounterMode``."""

from __future__ import annotations

import copy
import json
import time

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import torchgraphrec as tgr
from torchgraphrec.export import to_trace

_PAUSE_S = 0.05  # between two passes: what the user's code does there is no op's backward


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))


def _timed(run) -> int:
    start = time.perf_counter_ns()
    run()
    return time.perf_counter_ns() - start


def test_two_passes_through_one_graph_time_each_op_by_its_passes_alone() -> None:
    model, x = _mlp(), torch.randn(8, 16)
    with tgr.Recorder(model) as rec:
        out = model(x)
        first = _timed(lambda: out.pow(2).sum().backward(retain_graph=True))
        time.sleep(_PAUSE_S)
        second = _timed(lambda: out.sum().backward())
    graph = rec.recording.graph
    timed = [attrs for _, attrs in graph.nodes(data=True) if "t_backward_start_ns" in attrs]
    assert {attrs["kind"] for attrs in timed} == {"op", "layer"}
    for attrs in timed:
        spans = attrs["t_backward_spans_ns"]
        assert len(spans) == 4 and list(spans) == sorted(spans)  # one pass, then the other
        assert (spans[0], spans[-1]) == (attrs["t_backward_start_ns"],
                                         attrs["t_backward_end_ns"])
        # each pass lies inside the wall time of its backward() call, and the pause in
        # none: a node's backward time is at most the two calls' together
        assert attrs["backward_ms"] * 1e6 <= first + second, attrs
        assert spans[2] - spans[1] >= _PAUSE_S * 1e9 * 0.9
    assert tgr.validate(graph) is None


def test_the_trace_draws_a_slice_per_pass_and_none_across_the_pause() -> None:
    model, x = _mlp(), torch.randn(8, 16)
    with tgr.Recorder(model) as rec:
        out = model(x)
        out.pow(2).sum().backward(retain_graph=True)
        time.sleep(_PAUSE_S)
        out.sum().backward()
    events = json.loads(to_trace(rec.recording.graph))["traceEvents"]
    backward = [event for event in events
                if event.get("ph") == "X" and event["cat"].endswith(",backward")]
    names = [event["name"] for event in backward]
    assert names.count("Sequential") == 2 and names.count("tanh") == 2
    assert max(event["dur"] for event in backward) < _PAUSE_S * 1e6


def _penalty(x: torch.Tensor, out: torch.Tensor) -> None:
    """A gradient penalty (WGAN-GP's, R1's): the input gradient's norm, backed through."""
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    grad.pow(2).sum().backward()


def test_a_gradient_penaltys_second_order_flops_are_counted_as_flop_counter_mode_counts() -> None:
    model, x = _mlp(), torch.randn(8, 16).requires_grad_()
    plain = copy.deepcopy(model)
    with FlopCounterMode(display=False) as forward_only:
        plain(x.detach().clone())
    # the backward's apart, from a forward the counter did not see: on torch 2.4 its
    # module tracking hooks the tensors a forward under it takes and returns, and those
    # hooks refuse autograd.grad
    out = plain(x)
    with FlopCounterMode(display=False) as truth:
        _penalty(x, out)
    with tgr.Recorder(model, flops=True) as rec:
        _penalty(x, model(x))
    graph = rec.recording.graph
    assert graph.graph["flops"] == forward_only.get_total_flops()
    backward = truth.get_total_flops()
    assert graph.graph["backward_flops"] == backward
    assert backward > 2 * graph.graph["flops"]  # the second order's part is there
    grads = [(p.grad, q.grad) for p, q in zip(model.parameters(), plain.parameters())]
    # the last bias has no part in the input's gradient: None on both sides
    assert all((p is None and q is None) or torch.equal(p, q) for p, q in grads)
    assert sum(p is not None for p, _ in grads) == 3


class _KeepsItsLoss(nn.Module):
    """A router whose balance loss the forward keeps on the module, as MoE layers do."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.out = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.aux_loss = self.gate(x).softmax(-1).pow(2).mean()
        return self.out(x)


def test_a_loss_term_the_forward_keeps_is_backed_through_timed_and_counted() -> None:
    torch.manual_seed(0)
    model, x = _KeepsItsLoss(), torch.randn(8, 16)
    plain = copy.deepcopy(model)
    out = plain(x)
    with FlopCounterMode(display=False) as truth:
        (out.sum() + plain.aux_loss).backward()
    with tgr.Recorder(model, flops=True) as rec:
        out = model(x)
        (out.sum() + model.aux_loss).backward()
    graph = rec.recording.graph
    assert graph.graph["backward_flops"] == truth.get_total_flops()
    gate = graph.nodes["layer:gate#0"]
    assert gate["backward_flops"] > 0 and "t_backward_start_ns" in gate
    softmax = next(attrs for _, attrs in graph.nodes(data=True) if attrs.get("name") == "softmax")
    assert "t_backward_start_ns" in softmax


class _Boxed:
    """An output in an object the recorder cannot see into (no dataclass, no container)."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value


class _BoxesItsOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> _Boxed:
        return _Boxed(self.lin(x).relu())


def test_an_output_in_an_object_the_recorder_cannot_see_into_has_its_backward_timed() -> None:
    model, x = _BoxesItsOutput(), torch.randn(8, 16)
    with tgr.Recorder(model) as rec:
        model(x).value.sum().backward()
    graph = rec.recording.graph
    ops = {attrs["name"]: attrs for _, attrs in graph.nodes(data=True) if attrs["kind"] == "op"}
    assert "t_backward_start_ns" in ops["linear"] and "t_backward_start_ns" in ops["relu"]


class _KeepsARow(nn.Module):
    """Keeps a view of a value on the module, then writes the value in place."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.lin(x)
        self.first_row = hidden[0]
        hidden.mul_(2)
        return hidden.sum()


def _nodes_made(model: nn.Module, x: torch.Tensor, record: bool) -> int:
    before = torch.autograd._get_sequence_nr()
    if record:
        with tgr.Recorder(model):
            model(x)
    else:
        model(x)
    return torch.autograd._get_sequence_nr() - before


def test_following_live_values_makes_no_autograd_node_the_plain_run_does_not() -> None:
    # reading the grad_fn of a view whose base was written since makes autograd build one
    torch.manual_seed(0)
    model, x = _KeepsARow(), torch.randn(2, 4)
    assert _nodes_made(model, x, record=True) == _nodes_made(model, x, record=False)
