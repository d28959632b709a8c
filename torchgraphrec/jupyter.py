"""Rich display in Jupyter: the interactive report, an SVG and a plain-text summary.

Nothing here imports IPython: notebooks call :func:`mimebundle` through
``Recording._repr_mimebundle_``, and :func:`show` imports IPython only when called.
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Optional

import networkx as nx

__all__ = ["mimebundle", "report_frame", "show", "MAX_BYTES", "FRAME_HEIGHT"]

#: The most a notebook output may embed per format; bigger drawings are replaced by a
#: message saying how to see them.
MAX_BYTES = 8_000_000
#: The height of the report's frame in a notebook, in CSS pixels: the drawing and its
#: panel fit, the table and the timeline scroll inside.
FRAME_HEIGHT = 900


def _too_big(kind: str, size: int) -> str:
    return (f"<p><b>torchgraphrec:</b> this {kind} would embed {size / 1e6:.1f} MB in the "
            f"notebook (the cap is {MAX_BYTES / 1e6:.0f} MB). Show a shallower view with "
            "<code>rec.show(depth=2)</code>, or write the full report with "
            "<code>rec.to_html('report.html')</code>.</p>")


def report_frame(graph: nx.DiGraph, **options: Any) -> str:
    """The report as an ``<iframe srcdoc>``: the same page as ``rec.to_html``, in a
    document of its own, so that its scripts run in notebook front ends that do not run
    scripts in output HTML, and in notebooks exported to HTML; replaced by a message above
    :data:`MAX_BYTES`."""
    from torchgraphrec.render.html import to_html

    page = to_html(graph, **options)
    if len(page) > MAX_BYTES:
        return _too_big("report", len(page))
    title = html.escape(f"torchgraphrec report: {graph.graph.get('model', 'model')}")
    return (f'<iframe class="tgr-frame" title="{title}" srcdoc="{html.escape(page)}" '
            f'style="width: 100%; height: {FRAME_HEIGHT}px; border: 1px solid #e3e6ec; '
            f'border-radius: 4px"></iframe>')


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
            bundle["text/html"] = report_frame(graph, **options)
    except EngineError as exc:  # a summary beats a traceback in a notebook
        bundle["text/html"] = f"<p><b>torchgraphrec:</b> cannot draw here: {exc}</p>"
    return {kind: value for kind, value in bundle.items() if kind in wanted}


def show(graph: nx.DiGraph, plain: str, **options: Any) -> None:
    """Display the recording in the running notebook with these drawing options."""
    from IPython.display import display

    display(mimebundle(graph, plain, **options), raw=True)
