"""What a recording leaves as it found it where the user does something unusual: recorders
nested on one model, a transform around the forward, a hook of theirs that raises."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

import torchgraphrec as tgr
from helpers import hook_state
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
