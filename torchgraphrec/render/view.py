"""What to draw: the recorded graph cut to a depth, folded, filtered and lifted to visible nodes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import networkx as nx

from torchgraphrec.graph import collapse
from torchgraphrec.render import edges as edge_rules
from torchgraphrec.render.fold import call_tree
from torchgraphrec.render.folding import Folder, Folding
from torchgraphrec.render.options import AUTO, RenderOptions
from torchgraphrec.render.oproles import RESHAPE, argument_roles, in_role_order, is_bridged, \
    is_layout
from torchgraphrec.render.passthrough import wire_pass_through
from torchgraphrec.render.unshard import INTO, add_unshard

__all__ = ["View", "build_view", "folder_at", "AUTO_NODES"]

#: ``depth="auto"`` opens every level (blocks to their leaf modules, repeats folded); only
#: a drawing of more nodes than this, or one its ``fits`` says is too large once laid out,
#: stops at the deepest level that fits.
AUTO_NODES = 250


@dataclass
class View:
    """The drawing's content, engine-neutral.

    ``nodes`` are drawn as nodes (``box`` layers, tensors, params, ops) and ``clusters`` as
    nested clusters; ``parent`` maps both to their enclosing cluster (``None`` at the top),
    where a cluster may also be a ``group`` (a block of several repeated calls). A folded
    call is drawn once with ``repeats`` (how many), ``last`` (the last call it stands
    for) and ``calls`` (every call it stands for, first to last). An edge may end at a cluster (where no node inside carries it). ``order`` pairs
    are no data flow: they keep a tensor that a call's own code computed (recorded without
    ops, so with no producer) below what ran before it. ``drawn_as`` maps each node of
    ``folded`` at an end of a lifted edge to what draws it (itself, its box, its first
    repeat's counterpart) or, where it is not drawn, to what stands for it while the
    edges through it are bridged. ``labels`` names some edges: ``reshape`` for a chain of
    layout ops, an argument's role (``query``, ``key``, ``value``) into attention.
    ``markers`` are edges drawn as a small marker naming their source beside their target:
    a node used by every block (rotary cos/sin, a mask) draws one edge, not eighty.
    """

    source: nx.DiGraph
    folded: nx.DiGraph
    depth: Optional[int] = None
    nodes: list[str] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)
    parent: dict[str, Optional[str]] = field(default_factory=dict)
    repeats: dict[str, int] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)
    calls: dict[str, list[str]] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    order: list[tuple[str, str]] = field(default_factory=list)
    drawn_as: dict[str, str] = field(default_factory=dict)
    labels: dict[tuple[str, str], str] = field(default_factory=dict)
    markers: list[tuple[str, str]] = field(default_factory=list)

    def kind(self, node: str) -> str:
        """``box``, ``tensor``, ``param`` or ``op`` for a drawn node."""
        kind = self.folded.nodes[node]["kind"]
        return "box" if kind == "layer" else kind

    def inside(self) -> dict[str, set[str]]:
        """Each cluster's drawn nodes, nested clusters' included."""
        found: dict[str, set[str]] = {c: set() for c in [*self.clusters, *self.groups]}
        for node in self.nodes:
            cluster = self.parent.get(node)
            while cluster is not None:
                found[cluster].add(node)
                cluster = self.parent.get(cluster)
        return found


def build_view(graph: nx.DiGraph, options: RenderOptions,
               fits: Callable[[View], bool] = lambda view: True) -> View:
    """The :class:`View` of ``graph`` under ``options``.

    ``depth="auto"`` opens every level: each block down to its leaf modules (one box
    each), runs of repeated blocks folded. Only where that draws more than
    :data:`AUTO_NODES` nodes, or ``fits`` says no (a drawing too large once laid out, as
    an encoder-decoder whose decoder waits on the encoder's output at every level), it
    picks the deepest level within both that draws every module type one way (a type is
    not both opened as a cluster and cut into a box), else the deepest level within them,
    at least 1. ``fits`` is asked of the deepest candidates first, and no more once one
    fits.
    """
    wired = wire_pass_through(graph)
    if options.include_ops != "all":  # FSDP's unshard: one all_gather box per unit
        wired = add_unshard(wired)
    if options.depth != AUTO:
        return _build(wired, options)
    deepest = max((a["depth"] for _, a in graph.nodes(data=True) if a["kind"] == "layer"),
                  default=0)
    full = _build(wired, replace(options, depth=None))
    if options.expand_leaves or deepest <= 1 or \
            len(full.nodes) <= AUTO_NODES and fits(full):
        return full  # every level: the rule; the budget only stops a huge drawing
    fitting = [_build(wired, replace(options, depth=1))]
    for depth in range(2, deepest + 1):
        view = full if depth == deepest else _build(wired, replace(options, depth=depth))
        if len(view.nodes) > AUTO_NODES:
            break
        fitting.append(view)
    uniform = [view for view in fitting if _uniform(view)]
    candidates = [view for view in (uniform or fitting) if view is not full]
    return next((view for view in reversed(candidates) if fits(view)), fitting[0])


def _uniform(view: View) -> bool:
    """Whether no module type is drawn both as a cluster and as a box the cut closed."""
    source = view.source
    enclosing = {a["parent"] for _, a in source.nodes(data=True) if a["kind"] == "layer"}
    opened = {view.folded.nodes[c]["type"] for c in view.clusters}
    closed = {view.folded.nodes[n]["type"] for n in view.nodes
              if view.kind(n) == "box" and n in enclosing}
    return not opened & closed


def _build(graph: nx.DiGraph, options: RenderOptions) -> View:
    """The view at a resolved depth: the graph cut, its runs folded, the folding applied."""
    builder = _builder(graph, options)
    return builder.build(builder.folder.fold() if options.fold_repeats else Folding())


def _builder(graph: nx.DiGraph, options: RenderOptions) -> "_ViewBuilder":
    depth = options.depth  # a number or None: build_view resolved "auto"
    folded = graph if depth is None else _keep_model_outputs(graph, collapse(graph, depth))
    return _ViewBuilder(graph, folded, options)


def folder_at(wired: nx.DiGraph, options: RenderOptions) -> tuple[Folder, set[str]]:
    """The :class:`Folder` of the drawing at ``options.depth`` (a number or ``None``) of a
    graph whose pass-through calls are wired, with every run folded, those inside later
    repeats too, and the calls drawn as boxes there: what the report's page folds."""
    builder = _builder(wired, options)
    builder.folder.fold(inside_repeats=True)
    return builder.folder, builder.boxes


def _keep_model_outputs(source: nx.DiGraph, folded: nx.DiGraph) -> nx.DiGraph:
    """Put the model's outputs back after a cut: like its inputs, they stand outside it,
    fed by whichever drawn call swallowed their producer."""
    for node, attrs in source.nodes(data=True):
        if attrs.get("role") != "output" or node in folded:
            continue
        folded.add_node(node, **{**attrs, "parent": None, "depth": 0})
        first = min((a["seq"] for *_, a in source.in_edges(node, data=True)), default=attrs["seq"])
        # a value returned as it came in (an input) comes from that still: no call made it
        passed = [s for s in source.predecessors(node)
                  if s in folded and source.nodes[s]["kind"] == "tensor"]
        for producer in passed or [_drawn_ancestor(source, folded, attrs["parent"])]:
            folded.add_edge(producer, node, kind="flow", seq=first, t_ns=0, count=1)
    return folded


def _drawn_ancestor(source: nx.DiGraph, folded: nx.DiGraph, node: str) -> str:
    """``node``, or the nearest call above it that ``folded`` still holds."""
    while node not in folded:
        node = source.nodes[node]["parent"]
    return node


class _ViewBuilder:
    def __init__(self, source: nx.DiGraph, folded: nx.DiGraph, options: RenderOptions) -> None:
        self.source, self.graph, self.options = source, folded, options
        self.order, self.children, self.kind = call_tree(folded)
        # a leaf opens to its ops only where ops are drawn: else it would be an empty frame
        opened = options.expand_leaves and bool(options.include_ops)
        self.boxes = {n for n in self.order if self.kind[n] == "layer" and not any(
            self.kind[c] == "layer" or (self.kind[c] == "op" and opened)
            for c in self.children.get(n, ()))}
        self.folder = Folder(source, folded, self.order, self.children, self.kind, self.boxes)
        self.unproduced = _unproduced(folded, self.boxes) if folded.graph.get("ops") == "none" \
            else set()
        self.into = {n: a[INTO] for n, a in folded.nodes(data=True) if INTO in a}

    def canonical(self, node: str) -> str:
        """What stands for ``node``: its first repeat's counterpart, and for a node of
        FSDP's unshard the unit's box (see :mod:`~torchgraphrec.render.unshard`)."""
        node = self.folder.canonical(node)
        return self.into.get(node, node)

    def build(self, folding: Folding) -> View:
        """The view with ``folding`` applied: each later repeat drawn by its first."""
        self.view = View(self.source, self.graph, self.options.depth,  # type: ignore[arg-type]
                         parent=dict(folding.in_group), repeats=dict(folding.repeats),
                         last=dict(folding.last), calls=dict(folding.calls),
                         groups=dict(folding.groups))
        self._place()
        self._lift_edges()
        self._keep_order()
        return self.view

    def _visible(self, node: str) -> Optional[str]:
        """What ``node`` is drawn as: itself, the box it is in, or ``None`` (bridged)."""
        if node in self.folder.dropped:
            return None
        node = self.canonical(node)
        attrs = self.graph.nodes[node]
        kind = self.kind[node]
        if attrs.get("role") in ("input", "output"):
            return node  # the model's inputs and outputs are always drawn, named
        if attrs["parent"] in self.boxes:
            return attrs["parent"]
        if node in self.unproduced:
            return node  # computed by its call's own code: drawn, it shows where
        shown = {"layer": True, "tensor": self.options.include_tensors,
                 "param": self.options.include_params, "op": self.options.include_ops}
        if self.options.include_ops is True and is_bridged(attrs):
            return None  # drawn as the edge that bridges it (a layout op: its label)
        return node if shown[kind] else None

    def _place(self) -> None:
        view = self.view
        for node in self.order:
            if node in self.folder.fold_to or self._visible(node) != node:
                continue
            attrs = self.graph.nodes[node]
            # the model's outputs stand outside the model, as its inputs do
            parent = None if attrs.get("role") == "output" else attrs["parent"]
            view.parent.setdefault(node, parent)
            if self.kind[node] == "layer" and node not in self.boxes:
                view.clusters.append(node)
            else:
                view.nodes.append(node)
        for group in view.groups:
            first_call = group.removeprefix("group:")
            view.parent[group] = self.graph.nodes[first_call]["parent"]

    def _keep_order(self) -> None:
        """Keep each unproduced tensor below the drawn node that ran last before it."""
        inside = self.view.inside()
        # in seq order: a set's order changes from one run of Python to the next
        for node in sorted(self.unproduced & set(self.view.nodes),
                           key=lambda n: self.graph.nodes[n]["seq"]):
            seq = self.graph.nodes[node]["seq"]
            members = inside.get(self.view.parent.get(node), set(self.view.nodes))
            before = [n for n in members if self.graph.nodes[n]["seq"] < seq and n != node]
            if before:
                last = max(before, key=lambda n: self.graph.nodes[n]["seq"])
                self.view.order.append((last, node))

    def _recorded_edges(self) -> list[tuple[str, str]]:
        found = []
        for source, target, _ in sorted(self.graph.edges(data="seq"), key=lambda e: e[2]):
            if self.folder.inside_one_run(source, target):
                continue  # drawn once, by the run's first repeat
            if self.kind[source] == "param" and self._visible(source) not in (source, None):
                continue  # a parameter counted in its box is not data flowing out of it
            # "the call made it" is where the tensor is drawn, not an edge (but for the
            # model's outputs, drawn outside it)
            if target in self.unproduced and source == self.graph.nodes[target]["parent"] \
                    and self.graph.nodes[target].get("role") != "output":
                continue
            if self.graph.nodes[source].get("role") == "output":
                # a model output the model also used: the use comes from where it was made,
                # the output node stays the drawing's end
                found += [(producer, target) for producer in self.graph.predecessors(source)]
                continue
            found.append((source, target))
        return found

    def _roles(self) -> dict[tuple[str, str], str]:
        """The roles of the recorded edges into an op drawn as itself (an edge into the box
        that holds attention says nothing of a role); none unless ``include_ops=True``."""
        if self.options.include_ops is not True:
            return {}
        return {(s, t): role for (s, t), role in argument_roles(self.graph).items()
                if self._visible(t) == self.canonical(t)}

    def _lift_edges(self) -> None:
        def shown(node: str) -> Optional[str]:
            found = self._visible(node)
            self.view.drawn_as[node] = self.canonical(node) if found is None else found
            return found

        def via(node: str) -> str:
            layout = self.options.include_ops is True and is_layout(self.graph.nodes[node])
            return RESHAPE if layout else ""

        lifted = edge_rules.lift(self._recorded_edges(), shown, self.canonical,
                                 self.view.nodes + self.view.clusters, self._roles(), via)
        edge_rules.settle_cluster_ends(lifted, self.view.inside())
        self.view.markers = edge_rules.shared_inputs(list(lifted.edges))
        lifted.remove_edges_from(self.view.markers)
        self.view.labels = {(s, t): label for s, t, label in lifted.edges(data="label")
                            if label}
        self.view.edges = in_role_order(list(lifted.edges), self.view.labels)


def _unproduced(graph: nx.DiGraph, boxes: set[str]) -> set[str]:
    """Tensors that a drawn cluster's own code computed, recorded without ops: only the
    edge from that call says where they come from (``ops="none"`` records calls and their
    boundary tensors), so they are drawn where they were made."""
    return {node for node, attrs in graph.nodes(data=True)
            if attrs["kind"] == "tensor" and attrs["role"] != "input"
            and attrs["parent"] is not None and attrs["parent"] not in boxes
            and set(graph.predecessors(node)) <= {attrs["parent"]}}
