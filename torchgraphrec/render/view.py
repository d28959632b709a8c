"""What to draw: the recorded graph cut to a depth, folded, filtered and lifted to visible nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import networkx as nx

from torchgraphrec.graph import collapse
from torchgraphrec.render.fold import Run, find_runs, signatures
from torchgraphrec.render.options import RenderOptions

__all__ = ["View", "build_view"]


@dataclass
class View:
    """The drawing's content, engine-neutral.

    ``nodes`` are drawn as nodes (``box`` layers, tensors, params, ops) and ``clusters`` as
    nested clusters; ``parent`` maps both to their enclosing cluster (``None`` at the top),
    where a cluster may also be a ``group`` (a block of several repeated calls).
    """

    source: nx.DiGraph
    folded: nx.DiGraph
    nodes: list[str] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)
    parent: dict[str, Optional[str]] = field(default_factory=dict)
    repeats: dict[str, int] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    edges: dict[tuple[str, str], int] = field(default_factory=dict)

    def kind(self, node: str) -> str:
        """``box``, ``tensor``, ``param`` or ``op`` for a drawn node."""
        kind = self.folded.nodes[node]["kind"]
        return "box" if kind == "layer" else kind


def build_view(graph: nx.DiGraph, options: RenderOptions) -> View:
    """The :class:`View` of ``graph`` under ``options``."""
    folded = graph if options.depth is None else _keep_model_outputs(
        graph, collapse(graph, options.depth))
    return _ViewBuilder(graph, folded, options).build()


def _keep_model_outputs(source: nx.DiGraph, folded: nx.DiGraph) -> nx.DiGraph:
    """Put the model's outputs back after a cut: like its inputs, they stand outside it,
    fed by whichever drawn call swallowed their producer."""
    for node, attrs in source.nodes(data=True):
        if attrs.get("role") != "output" or node in folded:
            continue
        producer = attrs["parent"]
        while producer not in folded:
            producer = source.nodes[producer]["parent"]
        folded.add_node(node, **{**attrs, "parent": None, "depth": 0})
        first = min((a["seq"] for *_, a in source.in_edges(node, data=True)), default=attrs["seq"])
        folded.add_edge(producer, node, kind="flow", seq=first, t_ns=0, count=1)
    return folded


class _ViewBuilder:
    def __init__(self, source: nx.DiGraph, folded: nx.DiGraph, options: RenderOptions) -> None:
        self.view = View(source, folded)
        self.graph, self.options = folded, options
        self.order = sorted(folded.nodes, key=lambda n: folded.nodes[n]["seq"])
        self.children: dict[Optional[str], list[str]] = {}
        for node in self.order:
            self.children.setdefault(folded.nodes[node]["parent"], []).append(node)
        self.kind = {node: folded.nodes[node]["kind"] for node in self.order}
        self.boxes = {n for n in self.order if self.kind[n] == "layer" and not any(
            self.kind[c] == "layer" or (self.kind[c] == "op" and options.include_ops)
            for c in self.children.get(n, ()))}
        self.fold_to: dict[str, str] = {}
        self.repeat_of: dict[str, dict[int, int]] = {}
        self.dropped: set[str] = set()

    def build(self) -> View:
        if self.options.fold_repeats:
            self._fold()
        self._place()
        self._lift_edges()
        return self.view

    def _fold(self) -> None:
        graph = self.graph
        layers = [n for n in reversed(self.order) if self.kind[n] == "layer"]
        layers.sort(key=lambda n: -graph.nodes[n]["depth"])
        label_of = {n: self._fold_label(n) for n in self.order}
        signed = signatures(self.children, self.kind, label_of, layers)
        outermost_first = sorted(self.children, key=lambda n: -1 if n is None
                                 else graph.nodes[n]["depth"])
        for parent in outermost_first:
            if parent in self.fold_to:
                continue  # inside a repeat already drawn by its first copy
            calls = [c for c in self.children[parent] if self.kind[c] == "layer"]
            for run in find_runs([signed[c] for c in calls]):
                if self._between_calls(parent, run.repeat(calls, 0)[0],
                                       run.repeat(calls, run.count - 1)[-1]):
                    continue
                self._fold_run(len(self.view.groups) + len(self.view.repeats), calls, run)

    def _fold_label(self, node: str) -> tuple:
        """What must match, besides the children, for two nodes to be repeats."""
        attrs = self.graph.nodes[node]
        if attrs["kind"] == "tensor":
            return (attrs["shape"],)
        if attrs["kind"] != "layer":
            return (attrs.get("name") or attrs.get("shape"),)
        # parameters hang under a module's first call only, so a call is told apart by its
        # parameter count and shapes, which every call of the module shares
        shapes = tuple(self.view.source.nodes[t]["shape"] if t in self.view.source else None
                       for t in attrs["inputs"] + attrs["outputs"])
        return (attrs["type"], attrs["num_params"], shapes, node in self.boxes)

    def _between_calls(self, parent: Optional[str], first: str, last: str) -> bool:
        """Whether ``parent`` itself computed something while the run was going on."""
        start, end = self.graph.nodes[first]["t_start_ns"], self.graph.nodes[last]["t_end_ns"]
        for child in self.children.get(parent, ()):
            if self.kind[child] == "layer":
                continue
            times = [a["t_ns"] for *_, a in self.graph.in_edges(child, data=True)]
            if any(start < t < end for t in times):
                return True
        return False

    def _subtree(self, roots: list[str]) -> list[str]:
        """The nodes under ``roots`` in order, parameters left out: they hang under their
        module's first call only, and stay where they are, shared by every repeat."""
        found, stack = [], list(reversed(roots))
        while stack:
            node = stack.pop()
            if self.kind[node] != "param":
                found.append(node)
            stack.extend(reversed(self.children.get(node, ())))
        return found

    def _fold_run(self, run_id: int, calls: list[str], run: Run) -> None:
        first = self._subtree(list(run.repeat(calls, 0)))
        repeats = [self._subtree(list(run.repeat(calls, k))) for k in range(1, run.count)]
        if any(len(nodes) != len(first) for nodes in repeats):
            return
        for node in first:
            self.repeat_of.setdefault(node, {})[run_id] = 0
        for k, nodes in enumerate(repeats, start=1):
            for node, counterpart in zip(nodes, first):
                self.fold_to[node] = counterpart
                self.repeat_of.setdefault(node, {})[run_id] = k
                self._fold_params(node, counterpart)
        block = list(run.repeat(calls, 0))
        if run.period == 1:
            self.view.repeats[block[0]] = run.count
        else:
            group = f"group:{block[0]}"
            self.view.groups[group] = run.count
            for call in block:
                self.view.parent[call] = group

    def _fold_params(self, node: str, counterpart: str) -> None:
        """Map the parameters under a folded call to those under its counterpart, by
        position; one without a counterpart is not drawn."""
        own = [c for c in self.children.get(node, ()) if self.kind[c] == "param"]
        theirs = [c for c in self.children.get(counterpart, ()) if self.kind[c] == "param"]
        for index, param in enumerate(own):
            if index < len(theirs):
                self.fold_to[param] = theirs[index]
            else:
                self.dropped.add(param)

    def _canonical(self, node: str) -> str:
        """The node that draws ``node``: its counterpart in the first repeat of every run
        it was folded into (runs nest: a stage's blocks inside repeated stages)."""
        while node in self.fold_to:
            node = self.fold_to[node]
        return node

    def _inside_one_run(self, source: str, target: str) -> bool:
        """Whether the edge runs within or between the repeats of a folded run, where the
        first repeat stands for all of them."""
        runs_of_source, runs_of_target = self.repeat_of.get(source), self.repeat_of.get(target)
        if not runs_of_source or not runs_of_target:
            return False
        return any(runs_of_source[run] != runs_of_target[run] or runs_of_source[run] > 0
                   for run in runs_of_source.keys() & runs_of_target.keys())

    def _visible(self, node: str) -> Optional[str]:
        """What ``node`` is drawn as: itself, the box it is in, or ``None`` (bridged)."""
        if node in self.dropped:
            return None
        node = self._canonical(node)
        attrs = self.graph.nodes[node]
        kind = self.kind[node]
        if kind == "tensor" and attrs.get("role") == "output":
            return node if self.options.include_tensors else None
        if attrs["parent"] in self.boxes:
            return attrs["parent"]
        shown = {"layer": True, "tensor": self.options.include_tensors,
                 "param": self.options.include_params, "op": self.options.include_ops}
        return node if shown[kind] else None

    def _place(self) -> None:
        view = self.view
        for node in self.order:
            if node in self.fold_to or self._visible(node) != node:
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

    def _lift_edges(self) -> None:
        lifted = nx.DiGraph()
        lifted.add_nodes_from(self.view.nodes)
        hidden = set()
        edges = sorted(self.graph.edges(data=True), key=lambda e: e[2]["seq"])
        for source, target, attrs in edges:
            if self._inside_one_run(source, target):
                continue  # drawn once, by the run's first repeat
            if self.kind[source] == "param" and self._visible(source) != source:
                continue  # a parameter folded into a box is not data flowing out of it
            ends = []
            for node in (source, target):
                shown = self._visible(node)
                if shown is None:
                    shown = self._canonical(node)
                    hidden.add(shown)
                ends.append(shown)
            if ends[0] != ends[1]:
                _add(lifted, ends[0], ends[1], attrs.get("count", 1))
        _bridge(lifted, hidden)
        self.view.edges = {(s, t): a["count"] for s, t, a in lifted.edges(data=True)}


def _add(graph: nx.DiGraph, source: Any, target: Any, count: int) -> None:
    if graph.has_edge(source, target):
        graph.edges[source, target]["count"] += count
    else:
        graph.add_edge(source, target, count=count)


def _bridge(graph: nx.DiGraph, hidden: set) -> None:
    """Remove hidden nodes, joining each one's predecessors to its successors."""
    for node in [n for n in nx.topological_sort(graph) if n in hidden]:
        for source in list(graph.predecessors(node)):
            for target in list(graph.successors(node)):
                if source != target:
                    _add(graph, source, target, 1)
        graph.remove_node(node)
