"""The interactive HTML report: one self-contained file, no network, works from ``file://``.

The page shows the static drawing of the opening view at once (graphviz-pure's SVG), then
lays out every other view in the browser with the vendored viz-js (Graphviz in
WebAssembly), composing its DOT from the drawing description of
:mod:`~torchgraphrec.report.describe`. Everything inserted is escaped: Graphviz escapes the
drawing's text, jinja2 the page's, and no JSON or script can close its element.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
import networkx as nx

from torchgraphrec.report.describe import describe, drawn_graph, opening_depth
from torchgraphrec.render.dot import to_dot
from torchgraphrec.render.engine import run_engine
from torchgraphrec.render.marks import is_diff
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.report.pagedata import PLAIN_FORWARD, colour_choices, facts, node_info
from torchgraphrec.report.vendor import viz_js

__all__ = ["to_html", "report_fragment", "engine_script", "SCRIPTS", "BIG_DRAWING"]

#: The page's own scripts, in the order they are inlined.
SCRIPTS = ("compose.js", "layout.js", "frames.js", "view.js", "paint.js", "search.js", "details.js", "tables.js",
           "keys.js", "report.js")
#: Above this many boxes and ops, the page asks before laying a view out (about 2 s).
BIG_DRAWING = 1500
_PROLOG = re.compile(r"^.*?(?=<svg)", re.S)
_COMMENTS = re.compile(r"<!--.*?-->", re.S)
_NAMESPACES = re.compile(r'\s+xmlns(:xlink)?="[^"]*"')
_SIZE = re.compile(r'<svg width="[^"]*" height="[^"]*"')
_CLOSING = re.compile(r"</(script|style)", re.I)


def _inline_svg(svg: bytes) -> str:
    """An engine's SVG made fit to sit inside HTML: no prolog, no namespace URLs (HTML needs
    none), no fixed size (CSS sizes it; the viewBox stays)."""
    text = _COMMENTS.sub("", _PROLOG.sub("", svg.decode("utf-8"), count=1))
    return _SIZE.sub("<svg", _NAMESPACES.sub("", text), count=1)


def _script_json(value: Any) -> str:
    """JSON that cannot end its ``<script>`` element or open a comment.

    >>> _script_json({"a": "</script><!--"})
    '{"a":"\\\\u003c/script\\\\u003e\\\\u003c!--"}'
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _raw(text: str, name: str) -> str:
    """A script or style inlined as it is, refused if it could close its element."""
    if _CLOSING.search(text) or "<!--" in text:
        raise ValueError(f"{name} cannot be inlined: it holds '</script', '</style' or '<!--'")
    return text


@lru_cache(maxsize=None)
def _template(name: str) -> jinja2.Template:
    folder = resources.files("torchgraphrec.report") / "templates"
    environment = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    return environment.from_string((folder / name).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    text = (resources.files("torchgraphrec.report") / "templates" / name).read_text("utf-8")
    return _raw(text, name)


def _config(graph: nx.DiGraph, options: RenderOptions, depth: Any) -> dict[str, Any]:
    """The page's opening state and what its controls offer."""
    layers = [a["depth"] for _, a in graph.nodes(data=True) if a["kind"] == "layer"]
    return {
        "preset": {"depth": depth, "tensors": options.include_tensors,
                   "params": options.include_params, "ops": options.include_ops,
                   "leaves": options.expand_leaves, "fold": options.fold_repeats,
                   "rankdir": options.rankdir, "side": "both"},
        "deepest": max(layers, default=0),
        # a diff's colours say what changed: nothing else paints it
        "colour": colour_choices(nx.DiGraph() if is_diff(graph) else graph, options.color_by,
                                 options.style.scale),
        "big": BIG_DRAWING, "diff": is_diff(graph),
        "plain_ms": graph.graph.get(PLAIN_FORWARD),
        "sides": [graph.graph.get("diff_a_model", ""), graph.graph.get("model", "")],
    }


def engine_script() -> str:
    """What every report on a page shares, as one classic script: the layout engine
    (viz-js, defining ``Viz``) and the page's own functions (``tgrReport(root)`` starts a
    report). The notebook widget loads it once per page (:mod:`torchgraphrec.jupyter`)."""
    return viz_js().text + "\n" + "\n".join(_asset(name) for name in SCRIPTS)


def report_fragment(graph: nx.DiGraph, *, element_id: str = "tgr", scripts: bool = True,
                    **options: Any) -> str:
    """The report as an HTML fragment (a ``<div>`` with its style and scripts), for pages;
    ``element_id`` keeps several reports on one page apart. Without ``scripts`` it holds
    no script to run (only its data): the page has :func:`engine_script` already and starts
    it with ``tgrReport(root)``. The options are those of
    :class:`~torchgraphrec.render.options.RenderOptions`: the page opens as that static
    drawing would be drawn (``depth="auto"`` picks the depth), and its controls change
    every one of them but the theme and the label options.
    """
    settings = RenderOptions.of(options)
    depth = opening_depth(graph, settings)
    opening = replace(settings, depth=depth, color_by=None)  # the page colours by itself
    svg = run_engine(to_dot(graph, **vars(opening)), "svg", settings.engine)
    drawing = describe(graph, settings)
    return _template("report.html.j2").render(
        root_id=element_id, facts=facts(graph), svg=_inline_svg(svg),
        drawing_json=_script_json(drawing),
        data_json=_script_json(node_info(drawn_graph(graph), drawing["ids"])),
        config_json=_script_json(_config(graph, settings, depth)),
        style=_asset("report.css"), viz=_raw(viz_js().text, "viz-global.js") if scripts else "",
        script="\n".join(_asset(name) for name in SCRIPTS) if scripts else "")


def to_html(graph: nx.DiGraph, **options: Any) -> str:
    """The report as a whole HTML page; see :func:`report_fragment` for the options.

    >>> import torch, torchgraphrec
    >>> rec = torchgraphrec.record(torch.nn.Linear(2, 2), torch.ones(1, 2))
    >>> page = to_html(rec.graph)
    >>> page.startswith("<!DOCTYPE html>"), "<script src" in page, "<link" in page
    (True, False, False)
    """
    body = report_fragment(graph, element_id="tgr", **options)
    return _template("page.html.j2").render(title=graph.graph.get("model", "model"), body=body)
