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
