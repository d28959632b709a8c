"""DOT text (and pydot graphs) from a recorded graph: nested clusters, themed, deterministic."""

from __future__ import annotations

from typing import Any

import graphviz
import networkx as nx

from torchgraphrec.gcpause import gc_paused
from torchgraphrec.render.engine import EngineError, run_engine
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.view import View, build_view
from torchgraphrec.render.writer import DotWriter

__all__ = ["to_dot", "to_digraph", "to_pydot", "drawn_view", "AUTO_WIDTH", "AUTO_AREA"]

#: The largest drawing ``depth="auto"`` opens every level in, laid out, in points: about
#: two screens across the flow, and three times the area of ResNet-50's full drawing
#: (481 × 6,800). A tiny T5's is 3,714 × 6,669: its decoder waits on the encoder's output
#: at every level, so the two stand side by side, each as tall as the model.
AUTO_WIDTH, AUTO_AREA = 2000.0, 10_000_000.0


def to_digraph(graph: nx.DiGraph, **options: Any) -> graphviz.Digraph:
    """The drawing of ``graph`` as a :class:`graphviz.Digraph` (not rendered)."""
    settings = RenderOptions.of(options)
    with gc_paused():
        written: list[tuple[View, graphviz.Digraph]] = []
        view = drawn_view(graph, settings, written)
        for measured, digraph in written:
            if measured is view:
                return digraph
        return DotWriter(view, settings).write()


def to_dot(graph: nx.DiGraph, **options: Any) -> str:
    """The drawing of ``graph`` as DOT text; the options are those of
    :class:`~torchgraphrec.render.options.RenderOptions`.

    Every visible module call is a ``subgraph cluster_*`` nested as the module tree; nodes,
    edges and clusters carry stable ``id`` and ``class`` attributes for SVG. The same graph
    and options always give the same bytes.

    >>> import networkx as nx
    >>> from torchgraphrec.schema import SCHEMA_VERSION
    >>> g = nx.DiGraph(schema_version=SCHEMA_VERSION, model="Net", torch_version="2.13.0")
    >>> g.add_node("layer:#0", kind="layer", label="Net", parent=None, depth=0, seq=0,
    ...            qualname="", type="Net", call_index=0, t_start_ns=0, t_end_ns=1,
    ...            num_params=0, inputs=(), outputs=())
    >>> print(to_dot(g).splitlines()[0])
    digraph Net {
    """
    return to_digraph(graph, **options).source


def to_pydot(graph: nx.DiGraph, **options: Any) -> Any:
    """The drawing as a ``pydot.Dot`` (clusters included), for pydot users."""
    import warnings

    import pydot

    text = to_dot(graph, **options)
    with warnings.catch_warnings():  # pydot's parser uses pyparsing names it deprecated
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="pydot")
        (dot,) = pydot.graph_from_dot_data(text)
    return dot


def drawn_view(graph: nx.DiGraph, settings: RenderOptions,
               written: list[tuple[View, graphviz.Digraph]] | None = None) -> View:
    """The view the drawing of ``graph`` shows: ``depth="auto"`` resolved by the size of
    each candidate laid out, too (:data:`AUTO_WIDTH` across the flow, :data:`AUTO_AREA`);
    ``written`` collects each candidate measured with its DOT, for the caller to draw
    without writing it again.

    >>> import torch, torchgraphrec
    >>> rec = torchgraphrec.record(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2))
    >>> drawn_view(rec.graph, RenderOptions()).depth is None  # small: every level
    True
    """
    def fits(view: View) -> bool:
        digraph = DotWriter(view, settings).write()
        if written is not None:
            written.append((view, digraph))
        try:
            plain = run_engine(digraph.source, "plain", settings.engine)
        except EngineError:  # nothing to lay it out with here: the node budget alone
            return True
        # plain's first line: "graph <scale> <width> <height>", in inches
        width, height = (float(value) * 72 for value in plain.split(maxsplit=4)[2:4])
        across = height if settings.rankdir in ("LR", "RL") else width
        return across <= AUTO_WIDTH and width * height <= AUTO_AREA

    return build_view(graph, settings, fits)
