"""Spike: the drawing description a browser page needs to compose DOT for any expansion state.

Not the product: a prototype of what ``render/html.py`` could embed once the renderer of
issue 12 lands, written against today's renderer internals so that every fragment is the
text the DOT writer itself produces. Python decides every label, style, fold and placement;
the page only picks a form per element and lifts edges to what is visible
(``report_layout.js``, ``composeDot``).

Shape (all node references are indices into ``ids``, which is in ``seq`` order):

``head``: the ``digraph`` line and the graph/node/edge defaults (``rankdir=TB`` replaceable);
``style``: a node statement's themed attributes per style key; ``ids``, ``parent`` (-1 at
the top), ``kind`` (one letter a node: ``L`` layer, ``T`` tensor, ``M`` model input or
output, ``P`` param, ``O`` op), ``frag`` (a node's own attributes in its box form:
label, class, id, colour), ``cluster`` (a layer's ``graph [...]`` attributes in its
cluster form), ``needs`` (2: a cluster whenever open; 1: only while ops are shown),
``out`` (the model's outputs, drawn at the top), ``edges`` (leaf-level, ``[s, t, ...]`` in
``seq`` order), ``runs`` (folded repeats: calls of each repeat and their ``× N`` forms),
``fold_to`` and ``run_of`` (a later repeat's node -> its counterpart in the first, and the
run and repeat of each node), ``dropped`` (params with no counterpart).
"""

from __future__ import annotations

import re
from typing import Any, Optional

import networkx as nx

from torchgraphrec.render.dot import _DotWriter
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.view import View, _ViewBuilder

__all__ = ["drawing_data"]

_LINE = re.compile(r"^\t(n\d+) \[(.*)\]\n$", re.S)
_KIND = {"layer": "L", "tensor": "T", "param": "P", "op": "O"}


def _writer(graph: nx.DiGraph, options: RenderOptions) -> _DotWriter:
    writer = _DotWriter(View(graph, graph), options)
    writer.scale = writer._value_range()
    return writer


def _fragment(writer: _DotWriter, node: str, style: str) -> str:
    """A node statement's own attributes, without its name and its kind's shared style."""
    attrs = _LINE.match(writer._node_line(node)).group(2)
    return attrs.replace(" " + writer.styles[style], "", 1)


def _cluster(writer: _DotWriter, node: str) -> str:
    return writer._cluster_attrs(node)


def _folds(graph: nx.DiGraph, options: RenderOptions) -> _ViewBuilder:
    builder = _ViewBuilder(graph, graph, options)
    builder._fold()
    return builder


def _runs(builder: _ViewBuilder, index: dict[str, int], writer: _DotWriter,
          style_of: dict[str, str]) -> list[dict[str, Any]]:
    graph, found = builder.graph, {}
    for node, runs in builder.repeat_of.items():
        parent = graph.nodes[node]["parent"]
        for run, k in runs.items():
            if builder.repeat_of.get(parent, {}).get(run) != k:
                found.setdefault(run, {}).setdefault(k, []).append(node)
    result = []
    for run in sorted(found):
        repeats = [sorted(found[run][k], key=lambda n: graph.nodes[n]["seq"])
                   for k in sorted(found[run])]
        first = repeats[0]
        entry: dict[str, Any] = {"count": len(repeats),
                                 "calls": [[index[n] for n in calls] for calls in repeats]}
        if len(first) == 1:
            writer.view.repeats[first[0]] = len(repeats)
            entry["frag"] = _fragment(writer, first[0], style_of[first[0]])
            if graph.nodes[first[0]]["kind"] == "layer" and builder.children.get(first[0]):
                entry["cluster"] = _cluster(writer, first[0])
            del writer.view.repeats[first[0]]
        else:
            group = f"group:{first[0]}"
            writer.view.groups[group] = len(repeats)
            entry["group"] = _cluster(writer, group)
        result.append(entry)
    return result


def _needs(builder: _ViewBuilder, node: str) -> int:
    kinds = {builder.kind[c] for c in builder.children.get(node, ())}
    return 2 if "layer" in kinds else 1 if "op" in kinds else 0


def drawing_data(graph: nx.DiGraph, **options: Any) -> dict[str, Any]:
    """The per-element drawing description of ``graph`` (see the module's docstring)."""
    settings = RenderOptions.of({**options, "depth": None})
    order = sorted(graph.nodes, key=lambda n: graph.nodes[n]["seq"])
    index = {node: i for i, node in enumerate(order)}
    writer = _writer(graph, settings)
    builder = _folds(graph, settings)
    style_of, kinds, frags, clusters, needs = {}, [], [], {}, {}
    for node in order:
        attrs = graph.nodes[node]
        model_tensor = attrs["kind"] == "tensor" and attrs.get("role") in ("input", "output")
        style_of[node] = "model_tensor" if model_tensor else writer.view.kind(node)
        kinds.append("M" if model_tensor else _KIND[attrs["kind"]])
        frags.append(_fragment(writer, node, style_of[node]))
        if attrs["kind"] == "layer" and builder.children.get(node):
            clusters[index[node]] = _cluster(writer, node)
            if _needs(builder, node):
                needs[index[node]] = _needs(builder, node)
    head = writer.write().source.split("\n")[:4]
    return {
        "head": "\n".join(head) + "\n",
        "style": dict(writer.styles),
        "ids": order,
        "parent": [index.get(graph.nodes[n]["parent"], -1) for n in order],
        "kind": "".join(kinds),
        "frag": frags, "cluster": clusters, "needs": needs,
        "out": [index[n] for n in order if graph.nodes[n].get("role") == "output"],
        "edges": [i for s, t, _ in sorted(graph.edges(data=True), key=lambda e: e[2]["seq"])
                  for i in (index[s], index[t])],
        "runs": _runs(builder, index, writer, style_of),
        "fold_to": {index[n]: [index[c], _run_of(builder, n)] for n, c in builder.fold_to.items()},
        "run_of": {index[n]: [[r, k] for r, k in runs.items()]
                   for n, runs in builder.repeat_of.items()},
        "dropped": {index[n]: _run_of(builder, n) for n in builder.dropped},
    }


def _run_of(builder: _ViewBuilder, node: str) -> Optional[int]:
    """The run that folded ``node`` away: the one in which it is a later repeat (its
    parameters' owner's run for a parameter)."""
    graph = builder.graph
    probe: Optional[str] = node
    while probe is not None:
        for run, k in builder.repeat_of.get(probe, {}).items():
            if k > 0:
                return run
        probe = graph.nodes[probe]["parent"]
    return None
