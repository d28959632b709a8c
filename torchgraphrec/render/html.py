"""The interactive HTML report: one self-contained file, no network, works from ``file://``.

The page holds one pre-rendered SVG per depth, the recording's data as JSON, and a small
script of its own (pan and zoom, search, details, depth, collapse, a sortable table of calls
and a timeline). Everything inserted is escaped: Graphviz escapes the drawings' text, jinja2
the page's, and the JSON cannot close its script element.
"""

from __future__ import annotations

import datetime
import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Optional

import jinja2
import networkx as nx

from torchgraphrec.render import labels
from torchgraphrec.render.dot import to_dot
from torchgraphrec.render.engine import run_engine
from torchgraphrec.render.options import RenderOptions

__all__ = ["to_html", "report_fragment", "MAX_VIEWS"]

#: At most this many drawings per report: the full one and the shallowest depths.
MAX_VIEWS = 6
_PROLOG = re.compile(r"^.*?(?=<svg)", re.S)
_COMMENTS = re.compile(r"<!--.*?-->", re.S)
_NAMESPACES = re.compile(r'\s+xmlns(:xlink)?="[^"]*"')
_SIZE = re.compile(r'<svg width="[^"]*" height="[^"]*"')


def _inline_svg(svg: bytes) -> str:
    """An engine's SVG made fit to sit inside HTML: no prolog, no namespace URLs (HTML needs
    none), no fixed size (CSS sizes it; the viewBox stays)."""
    text = _COMMENTS.sub("", _PROLOG.sub("", svg.decode("utf-8"), count=1))
    return _SIZE.sub("<svg", _NAMESPACES.sub("", text), count=1)


def _script_json(value: Any) -> str:
    """JSON that cannot end its ``<script>`` element or open a comment."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _depths(graph: nx.DiGraph) -> list[Optional[int]]:
    deepest = max((a["depth"] for _, a in graph.nodes(data=True) if a["kind"] == "layer"),
                  default=0)
    return [None] + list(range(min(deepest, MAX_VIEWS - 1)))


def _views(graph: nx.DiGraph, options: RenderOptions) -> list[dict[str, Any]]:
    views = []
    for depth in _depths(graph):
        settings = {**vars(options), "depth": depth}
        svg = run_engine(to_dot(graph, **settings), "svg", options.engine)
        views.append({"label": "all levels" if depth is None else f"depth {depth}",
                      "svg": _inline_svg(svg)})
    return views


def _layer_rows(graph: nx.DiGraph) -> list[dict[str, Any]]:
    rows = []
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] != "layer":
            continue
        outputs = [graph.nodes[t]["shape"] for t in attrs["outputs"] if t in graph.nodes]
        rows.append({
            "id": node, "qualname": attrs["qualname"] or "(root)", "type": attrs["type"],
            "call": attrs["call_index"], "params": attrs["num_params"], "depth": attrs["depth"],
            "output": ", ".join(labels.shape_text(shape) for shape in outputs),
            "start": attrs["t_start_ns"], "end": attrs["t_end_ns"],
            "bstart": attrs.get("t_backward_start_ns"), "bend": attrs.get("t_backward_end_ns"),
        })
    return rows


def _data(graph: nx.DiGraph) -> dict[str, Any]:
    nodes = {node: dict(attrs) for node, attrs in graph.nodes(data=True)}
    svg_ids = {}
    for node, attrs in nodes.items():
        svg_ids[labels.xml_id("n", node)] = node
        if attrs["kind"] == "layer":
            svg_ids[labels.xml_id("c", node)] = node
    return {"graph": dict(graph.graph), "nodes": nodes, "svg_ids": svg_ids,
            "layers": _layer_rows(graph)}


def _summary(graph: nx.DiGraph) -> dict[str, Any]:
    counts = {kind: 0 for kind in ("layer", "op", "tensor", "param")}
    for _, kind in graph.nodes(data="kind"):
        counts[kind] += 1
    roots = [a for _, a in graph.nodes(data=True) if a["kind"] == "layer" and a["parent"] is None]
    return {
        "model": graph.graph.get("model", "model"),
        "params": labels.count_text(sum(a["num_params"] for a in roots[:1])) or "no parameters",
        "torch_version": graph.graph.get("torch_version", "?"),
        "forward_ms": sum(a["t_end_ns"] - a["t_start_ns"] for a in roots) / 1e6,
        "counts": counts,
        "written": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
    }


@lru_cache(maxsize=None)
def _template(name: str) -> jinja2.Template:
    folder = resources.files("torchgraphrec.render") / "templates"
    environment = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    return environment.from_string((folder / name).read_text(encoding="utf-8"))


def _asset(name: str) -> str:
    return (resources.files("torchgraphrec.render") / "templates" / name).read_text("utf-8")


def report_fragment(graph: nx.DiGraph, *, element_id: str = "tgr", **options: Any) -> str:
    """The report as an HTML fragment (a ``<div>`` with its style and script), for pages
    and notebooks; ``element_id`` keeps several reports on one page apart."""
    settings = RenderOptions.of(options)
    return _template("report.html.j2").render(
        root_id=element_id, summary=_summary(graph), views=_views(graph, settings),
        data_json=_script_json(_data(graph)), style=_asset("report.css"),
        script=_asset("report.js"), fragment=True)


def to_html(graph: nx.DiGraph, **options: Any) -> str:
    """The report as a whole HTML page; the options are those of
    :class:`~torchgraphrec.render.options.RenderOptions` (``depth`` is ignored: every depth
    is drawn, up to :data:`MAX_VIEWS` drawings)."""
    options.pop("depth", None)
    body = report_fragment(graph, element_id="tgr", **options)
    return _template("page.html.j2").render(title=graph.graph.get("model", "model"), body=body)
