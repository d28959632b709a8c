"""Finding runs of repeated sibling calls (the 12 blocks of GPT-2) to draw once, ``× N``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

__all__ = ["Run", "find_runs", "signatures"]

MAX_PERIOD = 8


@dataclass(frozen=True)
class Run:
    """``count`` consecutive repeats of a block of ``period`` sibling calls."""

    start: int
    period: int
    count: int

    def repeat(self, siblings: Sequence[Any], k: int) -> Sequence[Any]:
        """The calls of the ``k``-th repeat (0-based)."""
        first = self.start + k * self.period
        return siblings[first:first + self.period]


def find_runs(keys: Sequence[Hashable], max_period: int = MAX_PERIOD) -> list[Run]:
    """Maximal runs of a repeated block in ``keys``, left to right, without overlap.

    At each position the block length covering most items wins (the shorter on a tie), so
    ``L R L R L R`` is one run of ``(L R) × 3``.

    >>> find_runs("abababx")
    [Run(start=0, period=2, count=3)]
    >>> find_runs("xaaaybcbc")
    [Run(start=1, period=1, count=3), Run(start=5, period=2, count=2)]
    """
    runs: list[Run] = []
    position, size = 0, len(keys)
    while position < size:
        best = Run(position, 1, 1)
        for period in range(1, min(max_period, (size - position) // 2) + 1):
            block = keys[position:position + period]
            count = 1
            while keys[position + count * period:position + (count + 1) * period] == block:
                count += 1
            if count > 1 and count * period > best.count * best.period:
                best = Run(position, period, count)
        if best.count > 1:
            runs.append(best)
        position += best.period * best.count
    return runs


def signatures(children: Mapping[Any, Sequence[Any]], kind_of: Mapping[Any, str],
               label_of: Mapping[Any, Hashable], order: Sequence[Any]) -> dict[Any, int]:
    """A small integer per layer, equal for layers of the same type and inner structure.

    ``order`` lists the layers deepest first, so children are signed before their parents;
    a signature covers the type (``label_of``), the child layers' signatures and the kinds
    and labels of the other children, in order. Parameters do not count: they hang under
    their module's first call only.
    """
    interned: dict[tuple, int] = {}
    signed: dict[Any, int] = {}
    for layer in order:
        inner = tuple(signed[child] if kind_of[child] == "layer"
                      else (kind_of[child], label_of[child]) for child in children.get(layer, ())
                      if kind_of[child] != "param")
        key = (label_of[layer], inner)
        signed[layer] = interned.setdefault(key, len(interned))
    return signed
