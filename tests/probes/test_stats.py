"""Built-in statistics against float64 computations: empty tensors, half precision."""

from __future__ import annotations

import math

import pytest
import torch

from torchgraphrec.probes import stats


@pytest.mark.parametrize("name", ["min", "max", "absmax"])
def test_an_extreme_of_an_empty_tensor_is_nan(name: str) -> None:
    value = stats.STATS[name](torch.empty(0, 4))
    assert value.dim() == 0 and math.isnan(float(value))


def test_norms_of_float16_tensors_do_not_overflow() -> None:
    values = torch.full((256, 1024), 300.0, dtype=torch.float16)
    values[0, 0] = 50.0
    exact = values.double()
    # float32 accumulation over 2**18 elements: about 1e-4 relative, as for float32 tensors
    assert float(stats.rms(values)) == pytest.approx(float(exact.pow(2).mean().sqrt()), rel=1e-3)
    assert float(stats.l2(values)) == pytest.approx(float(exact.norm()), rel=1e-3)


def test_statistics_of_order_read_a_complex_tensor_by_its_magnitudes() -> None:
    values = torch.tensor([3 + 4j, 0j, -1 + 0j])
    magnitudes = torch.tensor([5.0, 0.0, 1.0])
    assert float(stats.min(values)) == 0.0 and float(stats.max(values)) == 5.0
    assert float(stats.dead(values)) == pytest.approx(1 / 3)
    assert torch.equal(stats.hist(values, bins=5), torch.histc(magnitudes, bins=5))


def test_a_histogram_leaves_out_what_is_not_finite() -> None:
    values = torch.tensor([0.0, 1.0, 2.0, float("inf"), float("-inf"), float("nan")])
    assert stats.hist(values, bins=2).tolist() == [1.0, 2.0]
    assert stats.hist(torch.tensor([float("inf")]), bins=3).tolist() == [0.0, 0.0, 0.0]
