"""Numbers as people read them: engineering units for FLOPs, bytes and times; counts as 70.6B."""

from __future__ import annotations

from typing import Mapping

__all__ = ["UNITS", "cost_text", "count_text"]

#: The unit of each cost attribute (see the schema's "Costs"); ``params`` is a layer's
#: ``num_params`` or a param node's element count.
UNITS: Mapping[str, str] = {
    "flops": "FLOPs", "backward_flops": "FLOPs", "saved_bytes": "B", "bytes": "B",
    "output_bytes": "B", "param_bytes": "B", "forward_ms": "ms", "self_ms": "ms",
    "backward_ms": "ms", "params": "params", "num_params": "params",
}

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
#: Counts of things (parameters) read as people say them: 70.6B, not 70.6G.
_COUNTS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"), (1.0, ""))


#: Where a value moves to the next unit: from 999.5 of a unit, which :func:`_number` would
#: round to "1000".
_NEXT_UNIT = 0.9995


def _number(value: float) -> str:
    """One decimal below 100, none from there, no trailing ``.0``: ``1.2``, ``34``, ``512``."""
    text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"
    return text[:-2] if text.endswith(".0") else text


def _prefixed(value: float, prefixes: tuple = _PREFIXES) -> tuple[str, str]:
    for limit, prefix in prefixes:
        if abs(value) >= limit * _NEXT_UNIT:  # 999,600 reads as 1M, not as 1000k
            return _number(value / limit), prefix
    return _number(value), ""


def _duration(ms: float) -> str:
    for limit, unit, scale in ((1000.0, "s", 1e-3), (1.0, "ms", 1.0), (1e-3, "µs", 1e3)):
        if ms >= limit * _NEXT_UNIT:
            return f"{_number(ms * scale)} {unit}"
    return "0 ms" if ms == 0 else f"{_number(ms * 1e6)} ns"


def cost_text(value: float, attribute: str) -> str:
    """``value`` of ``attribute`` as a person reads it: engineering units for the costs in
    :data:`UNITS` (decimal prefixes: 1 MB is 10⁶ bytes), three significant digits for any
    other number (a probe statistic).

    >>> cost_text(1.2e9, "flops"), cost_text(34_500_000, "saved_bytes")
    ('1.2 GFLOPs', '34.5 MB')
    >>> cost_text(3.14, "forward_ms"), cost_text(0.052, "self_ms"), cost_text(1234.0, "backward_ms")
    ('3.1 ms', '52 µs', '1.2 s')
    >>> cost_text(1_234_567, "params"), cost_text(950, "num_params"), cost_text(0, "flops")
    ('1.2M params', '950 params', '0 FLOPs')
    >>> cost_text(70_553_706_496, "params")
    '70.6B params'
    >>> cost_text(999_936, "flops"), cost_text(999_499, "flops"), cost_text(999.6, "forward_ms")
    ('1 MFLOPs', '999 kFLOPs', '1 s')
    >>> cost_text(0.000123456, "grad_output.rms")
    '0.000123'
    """
    unit = UNITS.get(attribute)
    if unit is None:
        return f"{value:.3g}"
    if unit == "ms":
        return _duration(float(value))
    if unit == "params":
        number, prefix = _prefixed(float(value), _COUNTS)
        return f"{number}{prefix} params"
    number, prefix = _prefixed(float(value))
    return f"{number} {prefix}{unit}"


def count_text(count: int) -> str:
    """A parameter count, short, ``""`` for none (a box without parameters says nothing).

    >>> count_text(0), count_text(950), count_text(12_345), count_text(70_553_706_496)
    ('', '950 params', '12.3k params', '70.6B params')
    """
    return cost_text(count, "params") if count > 0 else ""
