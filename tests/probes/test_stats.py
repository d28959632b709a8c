"""Built-in statistics against float64 computations: empty tensors, half precision."""

from __future__ import annotations

import math

import numpy
import pytest
import torch
from torch import nn

import torchgraphrec as tgr
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


def _pair(dtype: torch.dtype, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Two correlated tensors of ``dtype`` and magnitude ``scale``."""
    generator = torch.Generator().manual_seed(0)
    first = torch.randn(64, 1024, generator=generator)
    second = first + 0.5 * torch.randn(64, 1024, generator=generator)
    return (first * scale).to(dtype), (second * scale).to(dtype)


@pytest.mark.parametrize("dtype, scale", [(torch.float16, 350.0), (torch.bfloat16, 1e20),
                                          (torch.float32, 1e20), (torch.float32, 1e-20)])
def test_cosine_is_computed_without_overflow_or_underflow(dtype: torch.dtype,
                                                          scale: float) -> None:
    first, second = _pair(dtype, scale)
    a, b = first.double().flatten(), second.double().flatten()
    exact = a @ b / (a.norm() * b.norm())  # float64 squares neither overflow nor underflow
    cosine, memory = stats.Cosine(), {}
    assert math.isnan(float(cosine(0, first, memory)))  # the first time
    assert float(cosine(0, second, memory)) == pytest.approx(float(exact), rel=1e-5)
    assert float(cosine(0, second, memory)) == pytest.approx(1.0, abs=1e-5)


def test_cosine_of_an_empty_tensor_is_nan_and_not_remembered() -> None:
    cosine, memory, values = stats.Cosine(), {}, torch.tensor([1.0, 2.0])
    cosine(0, values, memory)
    assert math.isnan(float(cosine(0, torch.empty(0), memory)))
    assert math.isnan(float(cosine(0, torch.empty(0), memory)))
    assert float(cosine(0, -values, memory)) == pytest.approx(-1.0)  # with the one before


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["mean", "std", "min", "max", "absmax", "rms", "l2"])
def test_statistics_of_half_tensors_are_float32_and_match_float64(dtype: torch.dtype,
                                                                  name: str) -> None:
    values = (torch.randn(10000, generator=torch.Generator().manual_seed(0)) * 1e3).to(dtype)
    exact = values.double()
    truth = {"mean": exact.mean(), "std": exact.std(), "min": exact.min(), "max": exact.max(),
             "absmax": exact.abs().max(), "rms": exact.pow(2).mean().sqrt(),
             "l2": exact.norm()}[name]
    value = stats.STATS[name](values)
    assert value.dtype == torch.float32
    assert float(value) == pytest.approx(float(truth), rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_past_the_square_of_float32s_range_are_finite(dtype: torch.dtype) -> None:
    values = torch.tensor([1e20, -1e20, 1e20]).to(dtype)
    exact = values.double().norm()
    assert float(stats.l2(values)) == pytest.approx(float(exact), rel=1e-6)
    assert float(stats.rms(values)) == pytest.approx(float(exact) / math.sqrt(3), rel=1e-6)
    assert float(stats.l2(torch.tensor([1e20, math.inf]))) == math.inf  # a real inf stays


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_histogram_of_any_float_type_counts_every_value_as_float64_bins_do(
        dtype: torch.dtype) -> None:
    # counted in the tensor's own type, float16's range (max - min) overflowed to inf and
    # every bin read 0 or 4096, bfloat16's counts stopped at 256 apart
    torch.manual_seed(0)
    values = (torch.rand(100_000) * 2 - 1) * (60_000 if dtype == torch.float16 else 1e6)
    values = values.to(dtype)
    numbers = values.double().numpy()
    expected, _ = numpy.histogram(numbers, bins=16, range=(numbers.min(), numbers.max()))
    counts = stats.hist(values)
    assert counts.sum().item() == 100_000
    assert counts.tolist() == expected.tolist()


def test_a_histogram_of_a_tensor_without_data_reads_nan_in_every_bin() -> None:
    counts = stats.hist(torch.zeros(8, device="meta"), bins=4)
    assert counts.shape == (4,) and not stats.holds_data(counts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_of_values_whose_squares_underflow_float32_are_not_zero(
        dtype: torch.dtype) -> None:
    # a vanishing gradient: the squares of values near 1e-25 are below float32's least
    torch.manual_seed(0)
    values = (torch.randn(1000) * 1e-25).to(dtype)
    exact = math.sqrt(sum(v * v for v in values.double().tolist()))
    assert float(stats.l2(values)) == pytest.approx(exact, rel=1e-5, abs=0)
    assert float(stats.rms(values)) == pytest.approx(exact / math.sqrt(1000), rel=1e-5, abs=0)
    assert float(stats.l2(torch.zeros(3))) == 0.0


def test_two_statistics_of_one_name_in_a_keep_are_refused() -> None:
    # they were folded into one record: rec[...] had two entries per call
    with pytest.raises(ValueError, match=r"keep names '<lambda>' twice"):
        stats.keepers([lambda t: t.mean(), lambda t: t.abs().max()])
    with pytest.raises(ValueError, match=r"keep names 'mean' twice"):
        stats.keepers(["mean", torch.mean])


@pytest.mark.parametrize("keep", ["full", stats.full_on("cpu")], ids=["full", "full_on"])
def test_full_on_the_meta_device_keeps_each_value_as_a_value_without_data(keep) -> None:
    # a copy "out of a meta tensor" failed the recording: there is no data to copy
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    shapes = {}
    hooks = [m.register_forward_hook(lambda m, a, out, n=n: shapes.__setitem__(n, out.shape))
             for n, m in model.named_children()]
    model(torch.zeros(2, 4, device="meta"))
    for hook in hooks:
        hook.remove()
    with tgr.Recorder(model, probes=[tgr.probe("output", keep=keep)]) as recorder:
        model(torch.zeros(2, 4, device="meta"))
    for name, shape in shapes.items():
        [kept] = recorder[name, "output"]
        assert kept.device.type == "meta" and kept.shape == shape
