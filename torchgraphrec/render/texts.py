"""What each drawn node and cluster says: its label lines and its tooltip (the full path)."""

from __future__ import annotations

import weakref
from typing import Optional

import networkx as nx

from torchgraphrec.graph import value_of
from torchgraphrec.render import labels
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.scale import COSTS
from torchgraphrec.render.view import View
from torchgraphrec.text.units import count_text

__all__ = ["node_text", "cluster_text", "cluster_costs", "cost_names", "enclosing_qualname",
           "own_params_lines"]


def enclosing_qualname(view: View, node: str) -> str:
    """The qualname of the call drawn around ``node`` (``""`` at the top or in the root)."""
    cluster = view.parent.get(node)
    while cluster is not None and cluster in view.groups:
        cluster = view.parent.get(cluster)
    return "" if cluster is None else view.folded.nodes[cluster]["qualname"]


def _title(view: View, node: str) -> tuple[str, str]:
    """A call's short title and its full one (for the tooltip)."""
    attrs = view.folded.nodes[node]
    last = view.folded.nodes[view.last[node]] if node in view.last else None
    every = [view.folded.nodes[call]["qualname"] for call in view.calls.get(node, ())]
    short = labels.layer_title(attrs, enclosing_qualname(view, node), last, every)
    return short, labels.layer_title(attrs, None, last, every)


def cost_names(options: RenderOptions) -> tuple[str, ...]:
    """The costs a ``show_costs`` line writes: FLOPs and saved activations, and the cost
    the drawing is coloured by (a time, say), so that the colour can be read as a number
    (a box's parameter count is written anyway).

    >>> cost_names(RenderOptions(show_costs=True, color_by="forward_ms"))
    ('flops', 'saved_bytes', 'forward_ms')
    """
    extra = options.color_by
    if extra in COSTS and extra not in labels.LINE_COSTS and extra not in ("params", "num_params"):
        return (*labels.LINE_COSTS, extra)
    return labels.LINE_COSTS


def _costs(view: View, node: str, options: RenderOptions) -> list[str]:
    """The cost line of a box, cluster or op where ``show_costs`` asks for it and costs
    were recorded; a folded run's says what its calls cost (see
    :func:`~torchgraphrec.render.labels.run_cost_line`)."""
    if not options.show_costs:
        return []
    calls = view.calls.get(node)
    if calls and len(calls) > 1:
        line = labels.run_cost_line([view.folded.nodes[call] for call in calls],
                                    cost_names(options))
    else:
        line = labels.cost_line(view.folded.nodes[node], cost_names(options))
    return [line] if line else []


def cluster_costs(view: View, cluster: str, options: RenderOptions) -> list[str]:
    """The cost line under a cluster's title: everything inside it (``[]`` for a group
    of folded calls, whose members say theirs, or without ``show_costs``)."""
    if cluster in view.groups:
        return []
    return _costs(view, cluster, options)


def own_params_lines(view: View, cluster: str) -> list[str]:
    """What a cluster's module with submodules holds itself: drawn open, its submodules'
    boxes count theirs, and these would be counted nowhere (a fused MoE's expert weights,
    a ViT's class token). ``[]`` where it holds none, or has no submodule called (a leaf
    opened into its ops, which shows its parameters where they are asked for)."""
    if cluster in view.groups:
        return []
    count, enclosing = _own_params(view.source)
    attrs = view.folded.nodes[cluster]
    if attrs["qualname"] not in enclosing:
        return []
    own = count.get(attrs["qualname"], 0)
    return [f"{count_text(own)} of its own"] if own else []


def _own_params(graph: nx.DiGraph) -> tuple[dict[str, int], set[str]]:
    """Each module's parameter count, those of its submodules left out, by qualname; and
    the qualnames of the modules whose submodules were called."""
    found = _OWN_PARAMS.get(graph)
    if found is None:
        count: dict[str, int] = {}
        enclosing: set[str] = set()
        nodes = graph.nodes
        for _, attrs in graph.nodes(data=True):
            if attrs["kind"] == "param":
                owner = attrs["qualname"].rpartition(".")[0]
                count[owner] = count.get(owner, 0) + (value_of(attrs, "params") or 0)
            elif attrs["kind"] == "layer" and attrs["parent"] is not None:
                enclosing.add(nodes[attrs["parent"]]["qualname"])
        found = _OWN_PARAMS[graph] = (count, enclosing)
    return found


_OWN_PARAMS: "weakref.WeakKeyDictionary[nx.DiGraph, tuple[dict[str, int], set[str]]]" = \
    weakref.WeakKeyDictionary()


def node_text(view: View, node: str, options: RenderOptions) -> tuple[list[str], str]:
    """The label lines of a drawn node, and its tooltip."""
    attrs = view.folded.nodes[node]
    kind = view.kind(node)
    if kind == "box":
        short, full = _title(view, node)
        lines = labels.box_lines(attrs, view.source, short, show_shapes=options.show_shapes,
                                 show_settings=options.show_settings,
                                 repeats=view.repeats.get(node, 1))
        lines += _costs(view, node, options)
        settings = attrs.get("settings", "")
        return lines, f"{full}\n{settings}" if settings else full
    if kind == "tensor":
        lines = labels.tensor_lines(attrs, options.show_shapes)
        return lines, " ".join(lines)
    if kind == "param":
        return labels.param_lines(attrs, options.show_shapes), attrs["qualname"]
    lines = labels.op_lines(attrs, options.show_shapes) + _costs(view, node, options)
    args = attrs.get("args", "")
    return lines, f"{attrs['name']}({args})" if args else attrs["name"]


def cluster_text(view: View, cluster: str) -> tuple[str, Optional[str]]:
    """A cluster's title and tooltip: ``× N`` for a group of repeated calls."""
    if cluster in view.groups:
        return f"× {view.groups[cluster]}", None
    short, full = _title(view, cluster)
    repeats = view.repeats.get(cluster, 1)
    return (f"{short}  × {repeats}" if repeats > 1 else short), full
