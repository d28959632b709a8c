"""A drawing's legend: one table node holding the rows of its scale, diff marks and costs."""

from __future__ import annotations

from typing import Iterable, Sequence

from torchgraphrec.render import labels
from torchgraphrec.render.scale import TITLES

__all__ = ["legend_lines", "text_row", "costs_row"]


def text_row(text: str) -> str:
    """A legend row of plain text, left-aligned.

    >>> text_row("every call: train → eval")
    '<TR><TD ALIGN="LEFT">every call: train → eval</TD></TR>'
    """
    return f'<TR><TD ALIGN="LEFT">{labels.html_text(text)}</TD></TR>'


def costs_row(names: Iterable[str]) -> list[str]:
    """The row saying what the cost lines on the labels are, in their order (none if none
    is written).

    >>> costs_row(["flops", "saved_bytes"])
    ['<TR><TD ALIGN="LEFT">costs: forward FLOPs · activations saved for backward</TD></TR>']
    """
    words = [TITLES.get(name, name) for name in names]
    return [text_row("costs: " + " · ".join(words))] if words else []


def legend_lines(rows: Sequence[str]) -> list[str]:
    """The DOT line of the legend node holding ``rows`` (``<TR>`` elements), or none.

    >>> legend_lines([])
    []
    >>> legend_lines([text_row("x")])[0].startswith('\\tlegend [label=<<TABLE')
    True
    """
    if not rows:
        return []
    table = f'<<TABLE BORDER="0" CELLSPACING="3" CELLPADDING="0">{"".join(rows)}</TABLE>>'
    return [f'\tlegend [label={table} shape=plain class="tgr-legend" id="legend"]\n']
