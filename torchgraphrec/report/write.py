"""Writing a recorded graph to a file whose suffix names the format, atomically.

Drawings take :class:`~torchgraphrec.render.RenderOptions`; exports for other tools
(``.me.json``, ``.me-data.json``, ``.trace.json``) take their own few options.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import networkx as nx

from torchgraphrec.files import PathLike, write_atomic
from torchgraphrec.graph import to_json
from torchgraphrec.render.dot import to_dot
from torchgraphrec.render.engine import EngineFailure, run_engine
from torchgraphrec.render.options import RenderOptions

__all__ = ["write", "FORMATS", "OPTIONS", "format_of"]


def _drawing(fmt: str) -> Callable[[nx.DiGraph, RenderOptions], bytes]:
    def draw(graph: nx.DiGraph, options: RenderOptions) -> bytes:
        dot = to_dot(graph, **vars(options))
        if fmt == "dot":
            return dot.encode()
        return run_engine(dot, fmt, options.engine, dpi=options.dpi)
    return draw


def _graphml(graph: nx.DiGraph, options: RenderOptions) -> bytes:
    # GraphML has no tuples and no nulls: write those values as JSON text.
    def plain(attrs: dict) -> dict:
        return {k: json.dumps(v) if isinstance(v, (tuple, list, dict)) or v is None else v
                for k, v in attrs.items()}

    flat = nx.DiGraph(**plain(graph.graph))
    flat.add_nodes_from((n, plain(a)) for n, a in graph.nodes(data=True))
    flat.add_edges_from((s, t, plain(a)) for s, t, a in graph.edges(data=True))
    return "\n".join(nx.generate_graphml(flat)).encode()


def _report(graph: nx.DiGraph, options: RenderOptions) -> bytes:
    from torchgraphrec.report.html import to_html

    return to_html(graph, **vars(options)).encode()


def _export(name: str) -> Callable[[nx.DiGraph, dict], bytes]:
    def export(graph: nx.DiGraph, options: dict) -> bytes:
        import torchgraphrec.export as exporters

        return getattr(exporters, name)(graph, **options).encode()
    return export


def _keywords(suffix: str, *names: str) -> Callable[[dict], dict]:
    """A check that the options given to an export are the ones it takes."""
    def check(options: dict) -> dict:
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r} for {suffix} (must be one of "
                            f"{list(names)})")
        missing = [name for name in names if name not in options]
        if missing:
            raise TypeError(f"missing option {missing[0]!r} for {suffix}, e.g. "
                            f"render('costs{suffix}', {missing[0]}='flops')")
        return options
    return check


#: The writer of each suffix: ``writer(graph, options) -> bytes``, where ``options`` is
#: what :data:`OPTIONS` made of the keyword arguments. Compound suffixes come first.
FORMATS: dict[str, Callable[[nx.DiGraph, Any], bytes]] = {
    ".me.json": _export("to_model_explorer"),
    ".me-data.json": _export("to_node_data"),
    ".trace.json": _export("to_trace"),
    ".dot": _drawing("dot"),
    ".gv": _drawing("dot"),
    ".svg": _drawing("svg"),
    ".png": _drawing("png"),
    ".pdf": _drawing("pdf"),
    ".json": lambda graph, options: to_json(graph).encode(),
    ".html": lambda graph, options: _report(graph, options),
    ".graphml": _graphml,
}

#: How each suffix checks its keyword options; a drawing's are :class:`RenderOptions`.
OPTIONS: dict[str, Callable[[dict], Any]] = {
    ".me.json": _keywords(".me.json"),
    ".me-data.json": _keywords(".me-data.json", "data"),
    ".trace.json": _keywords(".trace.json"),
}


def format_of(path: PathLike) -> str:
    """The format suffix of ``path``: the longest known one its name ends with.

    >>> format_of("runs/model.me.json"), format_of("model.JSON"), format_of("x.trace.json")
    ('.me.json', '.json', '.trace.json')
    >>> format_of("model.bmp")
    Traceback (most recent call last):
    ValueError: unknown format: '.bmp' (must be one of ['.dot', '.graphml', ..., '.trace.json'])
    """
    name = Path(path).name.lower()
    for suffix in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    raise ValueError(f"unknown format: {Path(path).suffix.lower() or Path(path).name!r} "
                     f"(must be one of {sorted(FORMATS)})")


def write(graph: nx.DiGraph, path: PathLike, **options: Any) -> Path:
    """Write ``graph`` to ``path`` in the format its suffix names.

    Raises:
        ValueError: the suffix names no known format.
        TypeError: an option the format does not take, or a missing one it needs.
        EngineError: no layout engine here writes the format; :class:`EngineFailure`
            where every one that does failed: the drawing's DOT is then saved beside the
            target (``model.svg.dot``) for a bug report.
    """
    suffix = format_of(path)
    settings = OPTIONS.get(suffix, RenderOptions.of)(options)
    try:
        data = FORMATS[suffix](graph, settings)
    except EngineFailure as exc:
        saved = write_atomic(f"{path}.dot", to_dot(graph, **vars(settings)).encode())
        raise EngineFailure(f"{exc}\n(the drawing's DOT is saved in {str(saved)!r} for a bug "
                            "report)") from None
    return write_atomic(path, data)
