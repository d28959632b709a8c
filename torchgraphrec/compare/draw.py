"""Drawing a GraphDiff: its union graph in a drawing format, or (by the report) as a page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchgraphrec.render.write import PathLike, format_of, write, write_atomic

if TYPE_CHECKING:
    from torchgraphrec.compare.core import GraphDiff

__all__ = ["FORMATS", "render_diff", "diff_report"]

#: The formats a diff is written in: drawings of its union, and the union itself (``.json``).
FORMATS = (".dot", ".gv", ".json", ".pdf", ".png", ".svg")


def diff_report(diff: "GraphDiff", **options: Any) -> str:
    """The diff's interactive HTML page (side A, side B or both): the one entry point of
    ``.html``, written by ``torchgraphrec.render.html.diff_to_html(diff, **options)``
    where the report provides it.

    Raises:
        ValueError: the report does not draw diffs here.
    """
    from torchgraphrec.render import html

    to_html = getattr(html, "diff_to_html", None)
    if to_html is None:
        raise ValueError(f"a diff's .html report is not available yet: write one of "
                         f"{list(FORMATS)}")
    return to_html(diff, **options)


def render_diff(diff: "GraphDiff", path: PathLike, **options: Any) -> Path:
    """Write ``diff`` to ``path`` in the format its suffix names (see
    :meth:`~torchgraphrec.GraphDiff.render`)."""
    suffix = format_of(path)
    if suffix == ".html":
        return write_atomic(path, diff_report(diff, **options).encode())
    if suffix not in FORMATS:
        raise ValueError(f"unknown format for a diff: {suffix!r} (must be one of "
                         f"{[*FORMATS, '.html']})")
    return write(diff.union, path, **options)
