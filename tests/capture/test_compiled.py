"""Compiled submodules and functions: recorded op by op, and left compiled for the user."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator

import pytest
import torch

import torchgraphrec as tgr
from helpers import OpNames, op_names
from torchgraphrec._torch import SETS_STANCE


class _Counting:
    """A backend that runs the graph dynamo hands it (in Python, op by op), counting runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, graph: torch.fx.GraphModule, inputs: list) -> Callable:
        def run(*args: Any) -> Any:
            self.runs += 1
            return graph.forward(*args)
        return run


def _head(x: torch.Tensor) -> torch.Tensor:
    return (torch.softmax(x * 1.7, -1) * x.exp()).sum(-1) / x.var(-1)


class _Head(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _head(x)


class _Model(torch.nn.Module):
    def __init__(self, head: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.linear(x)) + 1


class _Raising(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise KeyError("in forward")


# torch 2.4's dynamo, which takes no stance, leaves is_in_torch_dispatch_mode() true for the
# rest of the process (its FakeTensorMode does, with no recorder), which later tests read
pytestmark = pytest.mark.skipif(not SETS_STANCE, reason="torch before 2.6 takes no stance")


@pytest.fixture(autouse=True)
def quiet_dynamo() -> Iterator[None]:
    with warnings.catch_warnings():  # dynamo's about global hooks and perf_counter_ns
        warnings.simplefilter("ignore")
        yield
    torch._dynamo.reset()  # each test compiles afresh


@pytest.mark.parametrize("compiled", ["module", "function"])
def test_compiled_code_is_recorded_op_by_op_and_stays_compiled(compiled: str) -> None:
    backend = _Counting()
    head = torch.compile(_Head() if compiled == "module" else _head, backend=backend)
    model = _Model(head)
    x = torch.randn(4, 8)
    expected = model(x)
    model(x)
    assert backend.runs == 2
    with OpNames() as plain:
        torch.nn.Linear.forward(model.linear, x)  # the eager code, as the model means it
        _head(expected)
    recording = tgr.record(model, x)
    assert torch.equal(recording.output, expected)
    # the graph's ops are the eager code's: left compiled, dynamo compiled it again with
    # the recorder's op mode in it and named every op after the mode's first (mul)
    assert op_names(recording.graph) == [*plain.names, "add"]
    assert backend.runs == 2
    runs = backend.runs
    model(x)
    model(x)
    # every later call runs the compiled code (dynamo had marked it to skip for good)
    assert backend.runs == runs + 2


def test_the_compiler_stance_is_as_it_was_also_when_the_forward_raises() -> None:
    from torch._dynamo import eval_frame

    before = eval_frame._stance
    with torch.compiler.set_stance("eager_on_recompile"):
        during = eval_frame._stance
        with pytest.raises(KeyError, match="in forward"):
            tgr.record(_Raising(), torch.ones(1))
        assert eval_frame._stance == during
    assert eval_frame._stance == before


def test_nested_recorders_leave_the_stance_as_it_was_whichever_ends_first() -> None:
    from torch._dynamo import eval_frame

    model, before = _Raising(), eval_frame._stance
    # a raising forward ends the outer recorder's first: its hooks were registered first
    with pytest.raises(KeyError, match="in forward"):
        with tgr.Recorder(model):
            tgr.record(model, torch.ones(1))
    assert eval_frame._stance == before


def test_a_recording_begun_inside_a_compiled_function_records_eagerly() -> None:
    # torch takes no stance inside a compiled function's frame: the recorder sets none
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    shifted = torch.compile(lambda x: model(x) + 1, backend="eager")
    x = torch.randn(2, 4)
    with tgr.Recorder(model) as recorder:
        out = shifted(x)
    assert torch.equal(out, model(x) + 1)
    assert op_names(recorder.graph) == ["linear", "relu"]
