"""Saved bytes where torch cannot tell which saved-tensor hooks are active: not counted, said once, the user's hooks untouched."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import nodes_of
from torchgraphrec.capture import saved
from torchgraphrec.errors import SavedBytesNotCounted


@pytest.fixture
def unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """This torch as one without ``_top_saved_tensors_default_hooks`` (torch 2.4–2.7)."""
    monkeypatch.setattr(saved, "SAVED_TENSOR_HOOKS_READABLE", False)
    monkeypatch.setattr(saved, "_SAID", set())


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_saved_bytes_are_not_counted_and_that_is_said_once_per_process(unreadable: None) -> None:
    model, x = _model(), torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = tgr.record(model, x, memory=True).graph
        second = tgr.record(model, x, memory=True).graph
    said = [w for w in caught if issubclass(w.category, SavedBytesNotCounted)]
    assert len(said) == 1 and "cannot tell which saved-tensor hooks" in str(said[0].message)
    for graph in (first, second):
        assert not any("saved_bytes" in attrs for attrs in nodes_of(graph, "op").values())


def test_a_users_saved_tensor_hooks_still_get_every_tensor(unreadable: None) -> None:
    model, x = _model(), torch.randn(3, 4, requires_grad=True)
    seen: dict[str, int] = {"plain": 0, "recorded": 0}

    def counting(key: str) -> torch.autograd.graph.saved_tensors_hooks:
        def pack(tensor: torch.Tensor) -> torch.Tensor:
            seen[key] += 1
            return tensor
        return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)

    with counting("plain"):
        expected = model(x)
    with counting("recorded"), warnings.catch_warnings():
        warnings.simplefilter("ignore", SavedBytesNotCounted)
        recorded = tgr.record(model, x, memory=True).output
    assert seen["recorded"] == seen["plain"] > 0
    assert torch.equal(recorded, expected)
