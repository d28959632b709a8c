"""What a recording leaves as it found it where the user does something unusual: recorders
nested on one model, a transform around the forward, a hook of theirs that raises, a
forward that raises, an interrupt."""

from __future__ import annotations

import copy
import gc
import sys
import types
import weakref

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import torchgraphrec as tgr
from helpers import hook_state, nodes_of
from torchgraphrec.capture import headroom
from torchgraphrec.errors import SavedBytesNotCounted


def _small() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))


def test_recorders_nested_on_one_model_leave_the_recursion_limit_as_it_was() -> None:
    # their forwards end in the order their hooks were registered, not the reverse: the
    # limit rose by 65 with each pair
    model, x = _small(), torch.randn(2, 3)
    before = hook_state(model)
    for _ in range(3):
        with tgr.Recorder(model) as outer:
            with tgr.Recorder(model) as inner:
                model(x)
            tgr.record(model, x)
    assert hook_state(model) == before
    assert len(outer.recording.graph) > 0 and len(inner.recording.graph) > 0


class _SetsItsLimit(nn.Module):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.inner = limit, nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sys.setrecursionlimit(self.limit)  # the model's own, which a plain run leaves set
        return self.inner(x)


def test_a_limit_the_model_sets_stays_with_recorders_on_it_and_on_a_submodule() -> None:
    before = sys.getrecursionlimit()
    model = _SetsItsLimit(before + 4000)
    try:
        with tgr.Recorder(model), tgr.Recorder(model.inner):
            model(torch.randn(2, 3))
        assert sys.getrecursionlimit() == before + 4000
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.needs("saved_bytes")
def test_memory_true_around_vmap_records_and_says_the_bytes_were_not_counted() -> None:
    # the parameters vmap hands the model have no storage of their own: the recorder failed
    models = [_small() for _ in range(3)]
    params, buffers = torch.func.stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    x = torch.randn(5, 3)

    def ensemble() -> torch.Tensor:
        return torch.func.vmap(lambda p, b: torch.func.functional_call(base, (p, b), (x,)))(
            params, buffers)

    plain = ensemble()
    with pytest.warns(SavedBytesNotCounted, match="a torch.func transform"):
        with tgr.Recorder(base, memory=True) as recorder:
            out = ensemble()
    assert torch.equal(out, plain)
    assert "saved_bytes" not in recorder.recording.graph.graph


def test_a_users_global_pre_hook_that_raises_leaves_the_recording_going() -> None:
    # torch runs our always-called post-hook for a call whose pre-hook never ran: that
    # was taken for calls that did not nest, and the recorder stopped
    model, bad, good = _small(), torch.full((2, 3), float("nan")), torch.randn(2, 3)

    def no_nan(module: nn.Module, args: tuple) -> None:
        if any(a.isnan().any() for a in args if isinstance(a, torch.Tensor)):
            raise ValueError(f"NaN into {type(module).__name__}")

    handle = torch_module.register_module_forward_pre_hook(no_nan)
    try:
        with tgr.Recorder(model) as recorder:
            with pytest.raises(ValueError, match="NaN into Sequential"):
                model(bad)
            out = model(good)
    finally:
        handle.remove()
    assert torch.equal(out, model(good))
    layers = [a for _, a in recorder.recording.graph.nodes(data="kind") if a == "layer"]
    assert len(layers) == 4  # the good forward's calls


class _Mismatched(nn.Module):
    """A notebook's usual mistake: the second layer expects other features."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(64, 64), nn.Linear(63, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x).relu())


@pytest.mark.parametrize("memory", [False, True])
def test_a_forward_that_raises_leaves_the_model_and_its_input_free_to_go(memory: bool) -> None:
    # the recorder kept the exception it noted: its frames hold the activations, whose
    # saved-tensor hooks (memory=True) hold the recorder, a cycle through autograd that the
    # collector cannot see; every failed attempt kept its model and input for good
    model, x = _Mismatched(), torch.randn(4, 64)
    alive = [weakref.ref(model), weakref.ref(x)]
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        tgr.record(model, x, memory=memory)
    del model, x
    gc.collect()
    assert [ref() for ref in alive] == [None, None]


def test_an_interrupt_as_a_forwards_end_puts_the_limit_back_leaves_nothing_on() -> None:
    # Ctrl-C landing as the limit is put back: the second attempt, when the recorder
    # stopped, failed (the block had left the open list already) and the steps after it
    # never ran, leaving the FLOP counter's dispatch mode on for the rest of the session
    model, x = _small(), torch.randn(2, 3)
    before = (sys.getrecursionlimit(), _get_current_dispatch_mode_stack(), hook_state(model))

    def interrupt(frame, event, arg):  # noqa: ANN001, ANN202 - a trace function
        if event == "call" and frame.f_code is headroom._set_limit.__code__ and \
                frame.f_back.f_code.co_name == "__exit__":
            sys.settrace(None)
            raise KeyboardInterrupt
        return None

    with pytest.raises(KeyboardInterrupt):
        with tgr.Recorder(model, flops=True):
            sys.settrace(interrupt)
            try:
                model(x)
            finally:
                sys.settrace(None)
    assert (sys.getrecursionlimit(), _get_current_dispatch_mode_stack(),
            hook_state(model)) == before


class _Interrupted(nn.Module):
    """Stands for a long forward the user stops with Ctrl-C."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupt = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.interrupt:
            raise KeyboardInterrupt
        return x * 2


def test_an_interrupt_caught_inside_the_block_ends_that_forward_there() -> None:
    # torch runs no always_call hook for a BaseException: the forward stayed open until
    # the next one, the user's torch calls meanwhile recorded as the interrupted call's
    # ops, with the collector paused and the recursion limit raised
    torch.manual_seed(0)
    stop = _Interrupted()
    model, x = nn.Sequential(nn.Linear(4, 4), stop, nn.Linear(4, 2)), torch.randn(2, 4)
    before = (gc.isenabled(), sys.getrecursionlimit(), _get_current_function_mode_stack())
    with tgr.Recorder(model) as recorder:
        stop.interrupt = True
        try:
            model(x)
        except KeyboardInterrupt:
            pass
        stop.interrupt = False
        meanwhile = (gc.isenabled(), sys.getrecursionlimit(), _get_current_function_mode_stack())
        (torch.randn(3, 3) @ torch.randn(3, 3)).trace()  # the user's own work
        out = model(x)
    assert meanwhile == before
    assert torch.equal(out, model(x))
    graph = recorder.recording.graph
    names = [attrs["name"] for _, attrs in sorted(nodes_of(graph, "op").items(),
                                                  key=lambda item: item[1]["seq"])]
    assert names == ["linear", "linear", "mul", "linear"]  # the cut forward's, the next's


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError(f"bad {x.shape[0]}")


class _FallsBack(nn.Module):
    """Catches the first call's error and calls the second, whose error propagates."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = _Raises(), _Raises()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            self.first(x)
        except ValueError:
            pass
        return self.second(x)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes are Python 3.11's")
def test_an_error_after_one_the_model_caught_gets_its_own_note() -> None:
    # the second error can take the first one's address once that is freed: noted by id,
    # it went without a note
    with pytest.raises(ValueError, match="bad 2") as caught:
        with tgr.Recorder(_FallsBack()) as recorder:
            recorder.model(torch.ones(2))
    assert caught.value.__notes__ == [
        "torchgraphrec: raised in the call of 'second' (_Raises, call_index 0)"]


class _OwnForward(nn.Module):
    """Its forward set on the instance (as accelerate's and peft's wrappers do)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.stop = nn.Linear(4, 4), _Interrupted()
        self.forward = types.MethodType(_OwnForward.run, self)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        return self.stop(self.lin(x))


def test_an_interrupt_caught_in_a_model_with_its_own_forward_ends_that_forward_there() -> None:
    # the watch was on the bound forward, which such a module keeps: it never went, and
    # the next forward was recorded inside the interrupted call
    model, x = _OwnForward(), torch.randn(2, 4)
    with tgr.Recorder(model) as recorder:
        model.stop.interrupt = True
        try:
            model(x)
        except KeyboardInterrupt:
            pass
        model.stop.interrupt = False
        x + 1  # the user's own op
        model(x)
    layers = nodes_of(recorder.recording.graph, "layer")
    assert layers["layer:#1"]["parent"] is None
    names = [attrs["name"] for _, attrs in sorted(nodes_of(recorder.recording.graph, "op").items(),
                                                  key=lambda item: item[1]["seq"])]
    assert names == ["linear", "linear", "mul"]
