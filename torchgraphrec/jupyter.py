"""Rich display in Jupyter: the interactive report, an SVG and a plain-text summary.

In a kernel with ``anywidget`` installed the report is a widget (JupyterLab, Notebook 7,
VS Code, Colab): its layout engine and scripts are sent once per page and its data per
display, as messages a saved notebook does not keep, so a saved notebook holds each
display's SVG (for GitHub, nbviewer and other renderers without JavaScript) and a few
hundred bytes of widget state. Elsewhere the report is an ``<iframe srcdoc>`` page.
Nothing here imports IPython at module level.
"""

from __future__ import annotations

import html
import sys
import tempfile
import webbrowser
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Optional

import networkx as nx

__all__ = ["mimebundle", "report_frame", "report_widget", "report_widget_available",
           "in_notebook", "show", "MAX_BYTES",
           "FRAME_HEIGHT", "WIDGET_MIME"]

#: The most a notebook output may embed per format; bigger drawings are replaced by a
#: message saying how to see them.
MAX_BYTES = 8_000_000
#: The height of the report's frame in a notebook, in CSS pixels: the drawing and its
#: panel fit, the table and the timeline scroll inside.
FRAME_HEIGHT = 900
#: The output type a front end with the widget manager draws a widget from.
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _too_big(kind: str, size: int) -> str:
    # the report holds the whole recording whatever its depth (the page opens and closes
    # calls itself), so a shallower view is as big: only leaving the output helps
    return (f"<p><b>torchgraphrec:</b> this {kind} would embed {size / 1e6:.1f} MB in the "
            f"notebook (the cap is {MAX_BYTES / 1e6:.0f} MB); it holds the whole recording "
            "at any depth. Write it to a file with <code>rec.to_html('report.html')</code> "
            "and open that in a web browser, or install <code>anywidget</code> "
            "(<code>pip install 'torchgraphrec[notebook]'</code>) to show it in the notebook "
            "as a widget, whose data the notebook does not store.</p>")


def report_frame(graph: nx.DiGraph, **options: Any) -> str:
    """The report as an ``<iframe srcdoc>``: the same page as ``rec.to_html``, in a
    document of its own, so that its scripts run in notebook front ends that do not run
    scripts in output HTML, and in notebooks exported to HTML; replaced by a message where
    the frame would be above :data:`MAX_BYTES`."""
    from torchgraphrec.report.html import to_html

    page = to_html(graph, **options)
    title = html.escape(f"torchgraphrec report: {graph.graph.get('model', 'model')}")
    frame = (f'<iframe class="tgr-frame" title="{title}" srcdoc="{html.escape(page)}" '
             f'style="width: 100%; height: {FRAME_HEIGHT}px; border: 1px solid #e3e6ec; '
             f'border-radius: 4px"></iframe>')
    size = len(frame.encode("utf-8"))  # what is embedded: escaping for srcdoc adds to the page
    return _too_big("report", size) if size > MAX_BYTES else frame


def _svg(graph: nx.DiGraph, options: dict[str, Any]) -> Optional[str]:
    from torchgraphrec.render.dot import to_dot
    from torchgraphrec.render.engine import run_engine

    svg = run_engine(to_dot(graph, **options), "svg", options.get("engine", "auto"))
    return svg.decode() if len(svg) <= MAX_BYTES else None


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython imported by it, never by us)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


@lru_cache(maxsize=1)
def _widget_class() -> Optional[type]:
    """The report widget's class, or ``None`` without ``anywidget``."""
    try:
        import anywidget
        import traitlets
    except ImportError:
        return None
    from importlib import resources

    from torchgraphrec.report.html import engine_script, report_fragment

    class ReportWidget(anywidget.AnyWidget):
        """The interactive report of one recording; its engine and data sent on request."""

        _esm = (resources.files("torchgraphrec.report") / "templates" / "widget.js").read_text("utf-8")
        model = traitlets.Unicode("").tag(sync=True)

        def __init__(self, graph: nx.DiGraph, **options: Any) -> None:
            super().__init__(model=str(graph.graph.get("model", "model")))
            self._graph, self._options = graph, options
            self.on_msg(self._answer)

        def _answer(self, _: Any, content: dict, buffers: Any) -> None:
            asked = content.get("ask") if isinstance(content, dict) else None
            if asked == "engine":
                text = engine_script()
            elif asked == "report":
                text = report_fragment(self._graph, element_id="tgr-" + self.model_id[:12],
                                       scripts=False, **self._options)
            else:
                return
            self.send({"answer": asked}, buffers=[text.encode("utf-8")])

    return ReportWidget


def report_widget_available() -> bool:
    """Whether the report can be shown as a widget here (``anywidget`` installed)."""
    return _widget_class() is not None


def report_widget(graph: nx.DiGraph, **options: Any) -> Any:
    """The report as an ``anywidget`` widget, or ``None`` where ``anywidget`` is missing."""
    widget = _widget_class()
    return None if widget is None else widget(graph, **options)


def mimebundle(graph: nx.DiGraph, plain: str, include: Optional[Iterable[str]] = None,
               exclude: Optional[Iterable[str]] = None, **options: Any) -> dict[str, Any]:
    """The display formats of a recording: ``text/plain`` always; ``image/svg+xml`` when a
    layout engine is at hand; and the report: in a kernel with ``anywidget`` the widget
    (``application/vnd.jupyter.widget-view+json``), else ``text/html``."""
    from torchgraphrec.render.engine import EngineError

    widget = report_widget(graph, **options) if in_notebook() else None
    report = WIDGET_MIME if widget is not None else "text/html"
    wanted = set(include or (report, "image/svg+xml", "text/plain")) - set(exclude or ())
    bundle: dict[str, Any] = {"text/plain": plain}
    try:
        if "image/svg+xml" in wanted:
            svg = _svg(graph, options)
            if svg is not None:
                bundle["image/svg+xml"] = svg
        if report == WIDGET_MIME and WIDGET_MIME in wanted:
            shown = widget._repr_mimebundle_()  # anywidget: (data, metadata)
            bundle[WIDGET_MIME] = (shown[0] if isinstance(shown, tuple) else shown)[WIDGET_MIME]
        elif "text/html" in wanted:
            bundle["text/html"] = report_frame(graph, **options)
    except EngineError as exc:  # a summary beats a traceback in a notebook
        bundle["text/html"] = f"<p><b>torchgraphrec:</b> cannot draw here: {exc}</p>"
        wanted.add("text/html")
    return {kind: value for kind, value in bundle.items() if kind in wanted}


def show(graph: nx.DiGraph, plain: str, **options: Any) -> Optional[Path]:
    """Display the recording with these drawing options: in the running notebook, or,
    outside one, as the report opened in the web browser (its file returned)."""
    if not in_notebook():
        from torchgraphrec.report.html import to_html

        name = str(graph.graph.get("model", "model"))
        folder = Path(tempfile.mkdtemp(prefix="torchgraphrec-"))
        path = folder / f"{''.join(c if c.isalnum() else '_' for c in name)}.html"
        path.write_text(to_html(graph, **options), encoding="utf-8")
        webbrowser.open(path.as_uri())
        return path
    from IPython.display import display

    display(mimebundle(graph, plain, **options), raw=True)
    return None
