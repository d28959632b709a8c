"""``color_by``: the colour scale of one numeric attribute over a drawing, and its legend."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from torchgraphrec.render import labels
from torchgraphrec.render.theme import SCALE, is_logarithmic, scale_color

__all__ = ["COSTS", "INCLUSIVE", "TITLES", "value_of", "ColorScale"]

#: The cost attributes ``color_by`` takes by name, beside probe statistics (``site.stat``).
COSTS = ("flops", "saved_bytes", "forward_ms", "params", "backward_flops", "backward_ms",
         "self_ms", "num_params", "bytes", "output_bytes", "param_bytes")

#: Costs whose value on a call is the sum of what is drawn inside it: a cluster's would
#: only repeat its contents' total, so clusters are not painted by them.
INCLUSIVE = frozenset({"flops", "saved_bytes", "forward_ms", "params", "backward_flops",
                       "backward_ms", "num_params", "param_bytes"})


#: What a legend calls each cost (any other attribute, a statistic, by its own name).
TITLES = {"flops": "forward FLOPs", "backward_flops": "backward FLOPs",
          "saved_bytes": "activations saved for backward", "forward_ms": "forward time",
          "self_ms": "own forward time", "backward_ms": "backward time",
          "params": "parameters", "num_params": "parameters", "bytes": "tensor size",
          "output_bytes": "output size", "param_bytes": "parameter size"}


def value_of(attrs: Mapping[str, Any], name: str) -> Optional[float]:
    """The number ``name`` of a node, or ``None`` where it has none (an optional attribute
    not recorded, a value that is not a finite number). ``params`` is a layer's
    ``num_params`` and a param node's element count.

    >>> value_of({"kind": "param", "shape": (4, 8)}, "params"), value_of({"flops": 12}, "flops")
    (32, 12)
    >>> value_of({"flops": True}, "flops"), value_of({}, "forward_ms")
    (None, None)
    """
    if name == "params":
        if attrs.get("kind") == "param":
            return math.prod(attrs["shape"])
        name = "num_params"
    value = attrs.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


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

    @classmethod
    def of(cls, name: str, values: Iterable[Optional[float]]) -> Optional["ColorScale"]:
        """The scale of the ``values`` found (``None`` is skipped), or ``None`` if none is."""
        found = [value for value in values if value is not None]
        if not found:
            return None
        low, high = min(found), max(found)
        positive = [value for value in found if value > 0]
        if low == 0 and positive and is_logarithmic(min(positive), high):
            return cls(name, min(positive), high, True, True)
        return cls(name, low, high, is_logarithmic(low, high), False)

    def paints_clusters(self) -> bool:
        """Whether clusters are outlined by their value (not for sums of their contents)."""
        return self.name not in INCLUSIVE

    def color(self, value: float) -> tuple[str, str]:
        """The fill for ``value`` and a text colour that reads on it."""
        return scale_color(max(value, self.low), self.low, self.high)

    def legend_line(self) -> str:
        """The DOT line of the legend: the attribute, the colours, the two ends in units."""
        cells = "".join(f'<TD BGCOLOR="{color}" WIDTH="16" HEIGHT="12"></TD>' for color in SCALE)
        title = labels.html_text(TITLES.get(self.name, self.name)) + (
            " (log scale)" if self.logarithmic else "")
        low = ("≤ " if self.zeros else "") + labels.cost_text(self.low, self.name)
        high = labels.cost_text(self.high, self.name)
        table = (f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0"><TR><TD COLSPAN="10">'
                 f'{title}</TD></TR><TR>{cells}</TR><TR><TD COLSPAN="5" ALIGN="LEFT">'
                 f'{labels.html_text(low)}</TD><TD COLSPAN="5" ALIGN="RIGHT">'
                 f'{labels.html_text(high)}</TD></TR></TABLE>>')
        return f'\tlegend [label={table} shape=plain class="tgr-legend" id="legend"]\n'
