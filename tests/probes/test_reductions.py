"""Reductions over calls against float64 computations: undefined values, NaNs, batch sizes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchgraphrec as tgr


def _float64_cosines(vectors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([torch.nn.functional.cosine_similarity(a, b, dim=0)
                        for a, b in zip(vectors, vectors[1:])])


def test_a_running_cosine_leaves_out_the_first_undefined_one() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    grads: list[torch.Tensor] = []
    probes = [tgr.probe("param_grad", keep=["l2", "cosine"], reduce="running")]
    with tgr.Recorder(model, probes=probes, graph="first") as rec:
        for _ in range(6):
            model(torch.randn(16, 8)).pow(2).mean().backward()
            grads.append(model.weight.grad.detach().flatten().double().clone())
            optimizer.step()
            optimizer.zero_grad()
            rec.step()
    kept = rec["", "param_grad"]["weight"]["cosine"]
    truth = _float64_cosines(grads)
    assert (kept["count"], kept["undefined"], kept["other_shape"]) == (5, 1, 0)
    assert float(kept["mean"]) == pytest.approx(float(truth.mean()), rel=1e-5)
    assert float(kept["var"]) == pytest.approx(float(truth.var()), rel=1e-4)
    assert float(kept["min"]) == pytest.approx(float(truth.min()), rel=1e-5)
    assert float(kept["max"]) == pytest.approx(float(truth.max()), rel=1e-5)


def _outputs_of(model: nn.Module, batches: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each batch's output, as a plain forward computes it, in float64."""
    with torch.no_grad():
        return [model(x).double() for x in batches]


def test_an_empty_batch_is_left_out_of_running_and_summed_means() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    batches = [torch.randn(4, 3), torch.randn(0, 3), torch.randn(5, 3)]
    truth = torch.stack([out.mean() for out in _outputs_of(model, batches) if out.numel()])
    probes = [tgr.probe("output", keep=["mean", "std"], reduce="running"),
              tgr.probe("output", keep="mean", reduce="sum")]
    with tgr.Recorder(model, probes=probes) as rec:
        for x in batches:
            model(x)
    running = rec["", "output"]["mean"]
    assert (running["count"], running["undefined"]) == (2, 1)
    assert float(running["mean"]) == pytest.approx(float(truth.mean()), rel=1e-6)
    assert float(running["max"]) == pytest.approx(float(truth.max()), rel=1e-6)
    assert rec["", "output"]["std"]["undefined"] == 1
    summed = rec.store.reducers[("", "output")][("", "mean", 1)].result()
    assert float(summed) == pytest.approx(float(truth.sum()), rel=1e-6)


def test_a_nan_of_the_data_stays_visible_in_a_running_record() -> None:
    model = nn.Identity()
    batches = [torch.ones(2, 3), torch.tensor([[1.0, math.nan, 2.0]]), torch.ones(2, 3)]
    with tgr.Recorder(model, probes=[tgr.probe("output", keep=["max", "mean"],
                                               reduce="running")]) as rec:
        for x in batches:
            model(x)
    for stat in ("max", "mean"):
        kept = rec["", "output"][stat]
        assert (kept["count"], kept["undefined"]) == (3, 0)  # the NaN is not undefined...
        assert all(math.isnan(float(kept[m])) for m in ("mean", "min", "max"))  # ...it shows


def _loader_batches() -> list[torch.Tensor]:
    """A DataLoader's batches of 16 over 42 rows (``drop_last=False``): 16, 16 and 10."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(42, 8))
    return [x for (x,) in torch.utils.data.DataLoader(data, batch_size=16)]


def test_a_smaller_last_batch_is_left_out_of_a_running_tensor_with_a_warning() -> None:
    model = nn.Linear(8, 4)
    batches = _loader_batches()
    outputs = _outputs_of(model, batches)
    probes = [tgr.probe("output", keep=["full", "rms"], reduce="running")]
    with pytest.warns(UserWarning, match=r"got shape \(10, 4\) where its record holds \(16, 4\)"):
        with tgr.Recorder(model, probes=probes) as rec:  # and the block ends without error
            for x in batches:
                model(x).pow(2).mean().backward()
                rec.step()
    full, rms = rec["", "output"]["full"], rec["", "output"]["rms"]
    assert (full["count"], full["other_shape"], full["undefined"]) == (2, 1, 0)
    assert torch.allclose(full["mean"], (outputs[0] + outputs[1]) / 2, rtol=1e-6, atol=1e-7)
    assert torch.allclose(full["var"], torch.stack(outputs[:2]).var(dim=0), rtol=1e-5,
                          atol=1e-7)
    assert rms["count"] == 3  # a scalar of each batch folds as before


def test_a_sum_of_tensors_leaves_out_another_shape_instead_of_broadcasting_it() -> None:
    model = nn.Linear(8, 4)
    batches = [torch.randn(16, 8), torch.randn(1, 8)]  # a batch of one would broadcast
    outputs = _outputs_of(model, batches)
    with pytest.warns(UserWarning, match=r"reduce='sum' of 'full' at \(''"):
        with tgr.Recorder(model, probes=[tgr.probe("output", keep="full", reduce="sum")]) as rec:
            for x in batches:
                model(x)
    kept = rec["", "output"]
    assert kept.shape == (16, 4) and torch.allclose(kept.double(), outputs[0], rtol=1e-6)
