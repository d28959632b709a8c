"""Drawing a GraphDiff: its union graph in a drawing format, or as the interactive report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchgraphrec.report.write import PathLike, format_of, write

if TYPE_CHECKING:
    from torchgraphrec.compare.core import GraphDiff

__all__ = ["FORMATS", "render_diff"]

#: The formats a diff is written in: drawings of its union, the report of it (every depth
#: drawn as the union, marked), and the union itself (``.json``).
FORMATS = (".dot", ".gv", ".html", ".json", ".pdf", ".png", ".svg")


def render_diff(diff: "GraphDiff", path: PathLike, **options: Any) -> Path:
    """Write ``diff`` to ``path`` in the format its suffix names (see
    :meth:`~torchgraphrec.GraphDiff.render`).

    Raises:
        ValueError: a suffix that names no format, or one a diff is not written in.
    """
    suffix = format_of(path)
    if suffix not in FORMATS:
        raise ValueError(f"unknown format for a diff: {suffix!r} (must be one of "
                         f"{list(FORMATS)})")
    return write(diff.union, path, **options)
