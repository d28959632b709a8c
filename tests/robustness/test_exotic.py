"""Models that break peers: each recorded correctly or refused with a clear error."""

from __future__ import annotations

import copy
import sys
import warnings
from typing import Any

import networkx as nx
import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

import torchgraphrec as tgr
from helpers import hook_state, nodes_of
from models import ChainOps, deep_mlp
from torchgraphrec.recording import backward_loss


def _small() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def test_autocast_bfloat16_on_cpu() -> None:
    model, x = _small(), torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = copy.deepcopy(model)(x)
        recording = tgr.record(model, x)
    assert torch.equal(recording.output, expected) and expected.dtype == torch.bfloat16
    tgr.validate(recording.graph)
    output = next(a for a in nodes_of(recording.graph, "tensor").values() if a["role"] == "output")
    assert output["dtype"] == "bfloat16"


def test_data_parallel_wrapper() -> None:
    model = nn.DataParallel(_small())
    graph = tgr.record(model, torch.randn(3, 4)).graph
    tgr.validate(graph)
    assert {a["qualname"] for a in nodes_of(graph, "layer").values()} == {"", "module",
                                                                           "module.0",
                                                                           "module.1",
                                                                           "module.2"}


def test_functional_call_records_the_given_tensors_as_constants() -> None:
    inner = _small()
    params = {k: v.detach().clone().requires_grad_() for k, v in inner.named_parameters()}

    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(self.inner, params, (x,))

    recording = tgr.record(Functional(), torch.randn(3, 4), backward=True)
    tgr.validate(recording.graph)
    roles = [a["role"] for a in nodes_of(recording.graph, "tensor").values()]
    assert roles.count("input") == 1  # the batch
    assert roles.count("constant") == len(params)  # used by the forward, never received
    assert not nodes_of(recording.graph, "param")
    assert all(p.grad is not None for p in params.values())


def test_a_forward_returning_a_generator() -> None:
    class Lazy(nn.Module):
        def forward(self, x: torch.Tensor):
            return (x * i for i in range(3))

    model = nn.Sequential(nn.Linear(2, 2), Lazy())
    recording = tgr.record(model, torch.randn(1, 2))
    assert [t.shape for t in recording.output] == [torch.Size([1, 2])] * 3
    tgr.validate(recording.graph)


def test_a_module_that_calls_itself() -> None:
    class Recursive(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor, n: int = 3) -> torch.Tensor:
            return self.lin(x) if n == 0 else self(self.lin(x), n - 1)

    graph = tgr.record(Recursive(), torch.randn(1, 3)).graph
    tgr.validate(graph)
    roots = sorted((a["call_index"], a["depth"]) for a in nodes_of(graph, "layer").values()
                   if a["qualname"] == "")
    assert roots == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_ten_thousand_module_calls() -> None:
    graph = tgr.record(*deep_mlp(5000, 4)).graph
    layers = nodes_of(graph, "layer")
    assert len(layers) == 10_001
    tgr.validate(graph)


def test_a_hundred_thousand_ops_side_by_side() -> None:
    class Wide(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.chains = nn.ModuleList(ChainOps(1000) for _ in range(100))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.stack([chain(x) for chain in self.chains]).sum()

    graph = tgr.record(Wide(), torch.randn(3)).graph
    assert len(nodes_of(graph, "op")) == 100 * 1001 + 2
    assert nx.is_directed_acyclic_graph(graph)


def test_a_hundred_thousand_ops_in_one_chain_record_and_free_safely() -> None:
    model = ChainOps(100_000)
    before = hook_state(model)
    with pytest.warns(UserWarning, match="no grad_fn names past that depth"):
        recording = tgr.record(model, torch.randn(3))
    assert len(nodes_of(recording.graph, "op")) == 100_001
    del recording  # freeing the autograd chain must not crash (pytorch/pytorch#109948)
    assert hook_state(model) == before


def test_the_autograd_view_refuses_a_chain_it_cannot_walk_safely() -> None:
    model = ChainOps(100_000)
    before = hook_state(model)
    with pytest.raises(tgr.CaptureError, match="chains more than 25,000 autograd ops"):
        tgr.record(model, torch.randn(3), ops="autograd")
    assert hook_state(model) == before


def test_recording_beside_another_librarys_hooks() -> None:
    seen: list[str] = []
    other = [torch_module.register_module_forward_hook(lambda m, a, o: seen.append("global")),
             torch_module.register_module_forward_pre_hook(lambda m, a: seen.append("pre"))]
    try:
        model = _small()
        expected = copy.deepcopy(model)(torch.ones(1, 4))
        seen.clear()
        recording = tgr.record(model, torch.ones(1, 4))
    finally:
        for handle in other:
            handle.remove()
    assert torch.equal(recording.output, expected)
    assert seen.count("global") == seen.count("pre") == 4
    assert len(nodes_of(recording.graph, "layer")) == 4


def test_a_user_hook_that_raises() -> None:
    model = _small()

    def broken(module, args, output):
        raise KeyError("hook failed")

    model[1].register_forward_hook(broken)
    before = hook_state(model)
    with pytest.raises(KeyError, match="hook failed") as caught:
        tgr.record(model, torch.randn(2, 4))
    # the hook runs as ReLU's call ends, after the recorder saw it end: the note still
    # names ReLU's call, where the traceback says it raised
    assert caught.value.__notes__ == [
        "torchgraphrec: raised in the call of '1' (ReLU, call_index 0)"]
    assert hook_state(model) == before


def test_a_user_hook_that_raises_in_a_later_call_of_a_shared_module() -> None:
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    calls = []

    def broken_second_time(module, args, output):
        calls.append(module)
        if len(calls) == 2:
            raise KeyError("hook failed")

    shared.register_forward_hook(broken_second_time)
    with pytest.raises(KeyError, match="hook failed") as caught:
        tgr.record(model, torch.randn(2, 4))
    assert caught.value.__notes__ == [
        "torchgraphrec: raised in the call of '0' (Linear, call_index 1)"]


def test_hostile_names_survive_json_and_validate() -> None:
    model = nn.Sequential()
    for name in ["</script>", "a&b", '"q"', "{x}", "|", "\\", "ünï"]:
        model.add_module(name, nn.Linear(2, 2))
    graph = tgr.record(model, torch.randn(1, 2)).graph
    again = tgr.from_json(tgr.to_json(graph))
    assert nx.utils.graphs_equal(again, graph)
    assert "layer:</script>#0" in again


def test_int_and_bool_tensors_flow() -> None:
    class Indexing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 3)

        def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
            return self.emb(ids) * keep.unsqueeze(-1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recording = tgr.record(Indexing(), (torch.tensor([[1, 2, 3]]),
                                            torch.tensor([[True, False, True]])), backward=True)
    inputs = {a["dtype"] for a in nodes_of(recording.graph, "tensor").values() if a["role"] == "input"}
    assert inputs == {"int64", "bool"}
    assert backward_loss(recording.output).item() == pytest.approx(recording.output.sum().item())


class Nested(nn.Module):
    """Modules nested ``depth`` deep, each running a Linear before the next."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.inner = Nested(depth - 1) if depth > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        return self.inner(x) if self.inner is not None else x


def _runs_within(limit: int, run: Any) -> bool:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        run()
        return True
    except RecursionError:
        return False
    finally:
        sys.setrecursionlimit(before)


def _least_limit(run: Any) -> int:
    """The least recursion limit ``run`` completes within (a bisection)."""
    low, high = 100, 5000
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if _runs_within(middle, run) else (middle + 1, high)
    return low


@pytest.mark.parametrize("options", [{}, {"flops": True, "memory": True, "backward": True}])
def test_a_model_nested_as_deep_as_a_plain_run_allows_records(options: dict) -> None:
    torch.manual_seed(0)
    model, x = Nested(150), torch.randn(1, 2)
    limit = _least_limit(lambda: backward_loss(model(x)).backward())
    before = hook_state(model)
    recorded: list = []
    assert _runs_within(limit, lambda: recorded.append(tgr.record(model, x, **options)))
    assert len(nodes_of(recorded[0].graph, "layer")) == 151 * 2
    assert torch.equal(recorded[0].output, model(x))
    assert hook_state(model) == before


# out of stack, any Python call fails, the recorder's hooks too: torch says so
@pytest.mark.filterwarnings("ignore:global module forward hook with ``always_call=True``")
@pytest.mark.parametrize("options", [{}, {"flops": True, "memory": True}])
def test_a_model_too_deep_for_the_recursion_limit_fails_leaving_nothing_behind(
        options: dict) -> None:
    model, x = Nested(150), torch.randn(1, 2)
    record = lambda: tgr.record(model, x, **options)  # noqa: E731
    limit = _least_limit(record)
    before = hook_state(model)
    # the recursion runs out at a different point of the recorder's work at each limit
    for short in range(limit - 100, limit - 5, 3):  # (a frame or two from the edge varies)
        assert not _runs_within(short, record)
        assert hook_state(model) == before
    assert len(nodes_of(tgr.record(model, x).graph, "layer")) == 151 * 2


class _CatchesAnInterrupt(nn.Module):
    """A submodule's forward raises KeyboardInterrupt, which the model catches."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.last = nn.Linear(4, 4), nn.Linear(4, 4)
        self.interrupted = _Interrupted()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.first(x)
        try:
            self.interrupted(y)
        except KeyboardInterrupt:
            pass
        return self.last(y).relu()


class _Interrupted(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt


def test_a_caught_keyboard_interrupt_is_refused_by_name_and_the_model_runs_as_unrecorded() -> None:
    # torch runs no always_call hook for a BaseException that is not an Exception: the
    # interrupted call never ends for the recorder, and what ran after it has no true parent
    model, x = _CatchesAnInterrupt(), torch.randn(2, 4)
    expected = model(x)
    before = hook_state(model)
    with pytest.raises(tgr.CaptureError, match=r"the call of 'interrupted' \(_Interrupted\) "
                                               r"ended without its forward hooks"):
        with tgr.Recorder(model):
            output = model(x)
    assert torch.equal(output, expected)
    assert hook_state(model) == before


def test_a_user_hook_that_raises_in_the_innermost_call_of_a_module_calling_itself() -> None:
    class Recursive(nn.Module):
        def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
            return self(x * 2, depth - 1) if depth else x.relu()

    inner = Recursive()
    seen = []

    def broken_first_time(module, args, output):
        seen.append(module)
        if len(seen) == 1:  # the innermost call ends first
            raise KeyError("hook failed")

    inner.register_forward_hook(broken_first_time)
    with pytest.raises(KeyError, match="hook failed") as caught:
        tgr.record(nn.Sequential(inner), torch.randn(2, 4))
    assert caught.value.__notes__ == [
        "torchgraphrec: raised in the call of '0' (Recursive, call_index 2)"]
