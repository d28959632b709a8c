"""Text widths of labels, so that boxes holding ``×``, ``→`` or ``…`` are sized right.

Graphviz without cairo (graphviz-pure, Graphviz's own ``-Tsvg`` estimate) sizes labels from
per-character widths of its core fonts, which cover ASCII only: every byte of a UTF-8
character counts as a space (``×`` is two bytes, ``→`` three) and a warning is printed. A
node gets a ``width`` from the widths below instead (the engine keeps the larger of that and
its own estimate), and the engine runs quietly, since the warning no longer holds.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["text_width", "needs_width", "FONTS"]

#: Advance widths (thousandths of an em) of printable ASCII (32 to 126), the core fonts'
#: standard metrics as graphviz-pure estimates them.
_HELVETICA = (
    "278 278 355 556 556 889 667 191 333 333 389 584 278 333 278 278 556 556 556 556 556 556 "
    "556 556 556 556 278 278 584 584 584 556 1015 667 667 722 722 667 611 778 722 278 500 667 "
    "556 833 722 778 667 778 722 667 611 722 667 944 667 667 611 278 278 278 469 556 333 556 "
    "556 500 556 556 278 556 556 222 222 500 222 833 556 556 556 556 333 500 278 556 500 722 "
    "500 500 500 334 260 334 584")
_TIMES = (
    "250 333 408 500 500 833 778 180 333 333 500 564 250 333 250 278 500 500 500 500 500 500 "
    "500 500 500 500 278 278 564 564 564 444 921 722 667 667 722 611 556 722 722 333 389 722 "
    "611 889 722 722 556 722 667 556 611 722 722 944 722 722 611 333 278 333 469 500 333 444 "
    "500 444 500 444 333 500 500 278 278 500 278 778 500 500 500 500 333 389 278 500 500 722 "
    "500 500 444 480 200 480 541")

#: The non-ASCII characters labels use, as the metric-compatible fonts that draw them
#: (Liberation Sans and Serif) measure them; any other one counts as an ``M``.
_EXTRA: Mapping[str, Mapping[str, int]] = {
    "Helvetica": {"×": 584, "→": 1000, "…": 1000, "–": 556, "·": 278},
    "Times-Roman": {"×": 564, "→": 1000, "…": 1000, "–": 500, "·": 250},
}

FONTS: Mapping[str, Mapping[str, int]] = {
    name: {**{chr(32 + index): int(width) for index, width in enumerate(table.split())},
           **_EXTRA[name]}
    for name, table in (("Helvetica", _HELVETICA), ("Times-Roman", _TIMES))
}


def needs_width(text: str) -> bool:
    """Whether the engine's own estimate of ``text`` is off: it holds non-ASCII characters.

    >>> needs_width("2x3"), needs_width("2×3")
    (False, True)
    """
    return not text.isascii()


def text_width(text: str, font: str, size: float) -> float:
    """The width of one line of ``text`` in points, in ``font`` at ``size`` points.

    >>> round(text_width("×", "Helvetica", 10.0), 2), round(text_width("x", "Helvetica", 10.0), 2)
    (5.84, 5.0)
    """
    widths = FONTS.get(font, FONTS["Helvetica"])
    wide = widths["M"]
    return sum(widths.get(char, wide) for char in text) * size / 1000
