"""``color_by``: the colour scale of one numeric attribute over a drawing, and its legend."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from torchgraphrec.graph import value_of
from torchgraphrec.render import labels
from torchgraphrec.render.theme import SCALE, is_logarithmic, scale_color

__all__ = ["COSTS", "INCLUSIVE", "TITLES", "value_of", "colorable", "ColorScale"]

#: The cost attributes ``color_by`` takes by name, beside probe statistics (``site.stat``).
COSTS = ("flops", "saved_bytes", "forward_ms", "params", "backward_flops", "backward_ms",
         "self_ms", "num_params", "bytes", "output_bytes", "param_bytes")

#: Costs whose value on a call is the sum of what is drawn inside it: a cluster's would
#: only repeat its contents' total, so clusters are not painted by them.
INCLUSIVE = frozenset({"flops", "saved_bytes", "forward_ms", "params", "backward_flops",
                       "backward_ms", "num_params", "param_bytes"})


#: What a legend calls each cost (any other attribute, a statistic, by its own name).
TITLES = {"flops": "forward FLOPs", "backward_flops": "backward FLOPs",
          "saved_bytes": "activations saved for backward",
          "forward_ms": "forward time", "self_ms": "own forward time",
          "backward_ms": "backward time",
          "params": "parameters", "num_params": "parameters", "bytes": "tensor size",
          "output_bytes": "output size", "param_bytes": "parameter size"}


def colorable(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names ``color_by`` can paint by that some node has a number for, sorted: the costs
    and the probe statistics (``site.stat``) the recording holds.

    >>> colorable([{"kind": "op", "flops": 96, "grad_output.rms": 0.5, "args": ""},
    ...            {"kind": "param", "shape": (4,), "forward_ms": None}])
    ['flops', 'grad_output.rms', 'params']
    """
    found = set()
    for attrs in nodes:
        found.update(name for name in attrs if (name in COSTS or "." in name)
                     and value_of(attrs, name) is not None)
        if value_of(attrs, "params") is not None:
            found.add("params")
    return sorted(found)


@dataclass(frozen=True)
class ColorScale:
    """The values of ``name`` from ``low`` to ``high``, on a log scale where they span two
    decades (zeros, which a log scale cannot place, take its lowest colour).

    >>> scale = ColorScale.of("flops", [0, 1_000, 2_000_000])
    >>> scale.logarithmic, scale.color(0)[0] == scale.color(1_000)[0] == SCALE[0]
    (True, True)
    >>> ColorScale.of("flops", [None, None]) is None
    True
    """

    name: str
    low: float
    high: float
    logarithmic: bool
    zeros: bool
    palette: tuple[str, ...] = SCALE

    @classmethod
    def of(cls, name: str, values: Iterable[Optional[float]],
           palette: Sequence[str] = SCALE) -> Optional["ColorScale"]:
        """The scale of the ``values`` found (``None`` is skipped) on ``palette``, or
        ``None`` if none is found."""
        found = [value for value in values if value is not None]
        if not found:
            return None
        low, high = min(found), max(found)
        positive = [value for value in found if value > 0]
        if low == 0 and positive and is_logarithmic(min(positive), high):
            return cls(name, min(positive), high, True, True, tuple(palette))
        return cls(name, low, high, is_logarithmic(low, high), False, tuple(palette))

    def paints_clusters(self) -> bool:
        """Whether clusters are outlined by their value (not for sums of their contents)."""
        return self.name not in INCLUSIVE

    def color(self, value: float) -> tuple[str, str]:
        """The fill for ``value`` and a text colour that reads on it."""
        return scale_color(max(value, self.low), self.low, self.high, self.palette)

    def middle(self) -> float:
        """The value at the middle of the scale (the geometric mean on a log scale)."""
        if self.logarithmic:
            return math.sqrt(self.low * self.high)
        return (self.low + self.high) / 2

    def legend_rows(self) -> list[str]:
        """The legend's rows: what is coloured, the colours in a frame (the palest shows
        on white), and the values at both ends and the middle, in units.

        >>> rows = ColorScale.of("flops", [0, 1_000, 2_000_000]).legend_rows()
        >>> "forward FLOPs (log scale)" in rows[0], "≤ 1 kFLOPs" in rows[0], "2 MFLOPs" in rows[0]
        (True, True, True)
        """
        count = len(self.palette)
        ends = [("≤ " if self.zeros else "") + labels.cost_text(self.low, self.name),
                labels.cost_text(self.middle(), self.name),
                labels.cost_text(self.high, self.name)]
        spans = (count // 3, count - 2 * (count // 3), count // 3)
        width = _cell_width(ends, spans)
        cells = "".join(f'<TD BGCOLOR="{color}" WIDTH="{width}" HEIGHT="12"></TD>'
                        for color in self.palette)
        title = labels.html_text(TITLES.get(self.name, self.name)) + (
            " (log scale)" if self.logarithmic else "")
        ticks = "".join(f'<TD COLSPAN="{span}" ALIGN="{align}">{labels.html_text(text)}</TD>'
                        for span, align, text in zip(spans, ("LEFT", "CENTER", "RIGHT"), ends))
        bar = (f'<TABLE BORDER="1" COLOR="#868e96" CELLBORDER="0" CELLSPACING="0" '
               f'CELLPADDING="0"><TR>{cells}</TR></TABLE>')
        table = (f'<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">'
                 f'<TR><TD COLSPAN="{count}" ALIGN="LEFT">{title}</TD></TR>'
                 f'<TR><TD COLSPAN="{count}">{bar}</TD></TR><TR>{ticks}</TR></TABLE>')
        return [f'<TR><TD ALIGN="LEFT">{table}</TD></TR>']


#: The widest a character of the legend's 10 pt text is, on average, in points.
_CHAR_POINTS = 6
#: The least width of a colour cell, in points.
_CELL_POINTS = 18


def _cell_width(ticks: Sequence[str], spans: Sequence[int]) -> int:
    """The width of a colour cell that leaves each tick text room under its span of cells,
    and a gap beside it: long values (``65.5 kFLOPs``) ran into each other under 18 pt cells.

    >>> _cell_width(["0 FLOPs", "5 FLOPs", "9 FLOPs"], (3, 4, 3))
    18
    >>> _cell_width(["0 FLOPs", "32.8 kFLOPs", "65.5 kFLOPs"], (3, 4, 3))
    26
    >>> _cell_width(["0 FLOPs", "32.8 kFLOPs", "65.5 kFLOPs"], (0, 2, 0))
    39
    """
    needed = [-(-(len(text) * _CHAR_POINTS + 2 * _CHAR_POINTS) // span)
              for text, span in zip(ticks, spans) if span]  # a palette of two has no ends
    return max(_CELL_POINTS, *needed)
