"""Rich display in Jupyter: the interactive report, an SVG and a plain-text summary.

Nothing here imports IPython: notebooks call :func:`mimebundle` through
``Recording._repr_mimebundle_``, and :func:`show` imports IPython only when called.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Optional

import networkx as nx

__all__ = ["mimebundle", "show", "MAX_BYTES"]

#: The most a notebook output may embed per format; bigger drawings are replaced by a
#: message saying how to see them.
MAX_BYTES = 8_000_000
_ids = itertools.count()


def _too_big(kind: str, size: int) -> str:
    return (f"<p><b>torchgraphrec:</b> this {kind} would embed {size / 1e6:.1f} MB in the "
            f"notebook (the cap is {MAX_BYTES / 1e6:.0f} MB). Show a shallower view with "
            "<code>rec.show(depth=2)</code>, or write the full report with "
            "<code>rec.to_html('report.html')</code>.</p>")


def _report(graph: nx.DiGraph, options: dict[str, Any]) -> str:
    from torchgraphrec.render.html import report_fragment

    html = report_fragment(graph, element_id=f"tgr-report-{next(_ids)}", **options)
    return html if len(html) <= MAX_BYTES else _too_big("report", len(html))


def _svg(graph: nx.DiGraph, options: dict[str, Any]) -> Optional[str]:
    from torchgraphrec.render.dot import to_dot
    from torchgraphrec.render.engine import run_engine

    svg = run_engine(to_dot(graph, **options), "svg", options.get("engine", "auto"))
    return svg.decode() if len(svg) <= MAX_BYTES else None


def mimebundle(graph: nx.DiGraph, plain: str, include: Optional[Iterable[str]] = None,
               exclude: Optional[Iterable[str]] = None, **options: Any) -> dict[str, str]:
    """The display formats of a recording: ``text/plain`` always; ``text/html`` (the
    report) and ``image/svg+xml`` when a layout engine is at hand."""
    from torchgraphrec.render.engine import EngineError

    wanted = set(include or ("text/html", "image/svg+xml", "text/plain")) - set(exclude or ())
    bundle = {"text/plain": plain}
    try:
        if "image/svg+xml" in wanted:
            svg = _svg(graph, options)
            if svg is not None:
                bundle["image/svg+xml"] = svg
        if "text/html" in wanted:
            bundle["text/html"] = _report(graph, dict(options))
    except EngineError as exc:  # a summary beats a traceback in a notebook
        bundle["text/html"] = f"<p><b>torchgraphrec:</b> cannot draw here: {exc}</p>"
    return {kind: value for kind, value in bundle.items() if kind in wanted}


def show(graph: nx.DiGraph, plain: str, **options: Any) -> None:
    """Display the recording in the running notebook with these drawing options."""
    from IPython.display import display

    display(mimebundle(graph, plain, **options), raw=True)
