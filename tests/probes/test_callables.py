"""``keep=callable`` (tensor_tracker's stash_value): what it returns is kept as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from torchgraphrec import select as S


def test_a_kept_view_of_an_activation_is_a_copy_counted_as_kept() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 1000), nn.ReLU(inplace=True))  # rewrites 0's output
    x = torch.randn(50, 4)
    at_call = []
    model[0].register_forward_hook(lambda m, a, out: at_call.append(out[0].detach().clone()))
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("^0$"),
                                               keep=lambda t: t[0])],
                      memory_limit=10_000) as rec:
        model(x)
    (kept,) = rec["0", "output"]
    assert torch.equal(kept, at_call[0]) and (kept < 0).any()
    assert kept.untyped_storage().nbytes() == rec.store.bytes == 1000 * 4


def test_a_callable_may_return_a_python_number() -> None:
    torch.manual_seed(0)
    model, batches = nn.Linear(4, 3), [torch.randn(2, 4) for _ in range(3)]
    with torch.no_grad():
        expected = [float(model(x).double().abs().max()) for x in batches]
    with tgr.Recorder(model, probes=[tgr.probe("output", keep=lambda t: t.abs().max().item()),
                                     tgr.probe("output", keep=lambda t: t.shape[0],
                                               reduce="sum")]) as rec:
        for x in batches:
            model(x)
    assert rec.frame().value.tolist() == pytest.approx(expected, rel=1e-6)
    assert int(rec.store.reducers[("", "output")][("", "<lambda>", 1)].result()) == 6


def test_a_callable_returning_neither_tensor_nor_number_is_refused_by_name() -> None:
    def label(tensor: torch.Tensor) -> str:
        return "big" if tensor.abs().max() > 1 else "small"

    model = nn.Linear(4, 3)
    with pytest.raises(tgr.CaptureError, match=r"keep='label' returned str 'big'.*'output'"):
        with tgr.Recorder(model, probes=[tgr.probe("output", keep=label)]):
            model(torch.full((2, 4), 10.0))  # the forward completes
