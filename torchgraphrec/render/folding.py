"""Folding a view: chains of identical sibling calls drawn once, and where their nodes go."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

import networkx as nx

from torchgraphrec.render.fold import Run, call_tree, chained, deepest_first, find_runs, \
    signatures, split_chains

__all__ = ["Folder", "FoldedRun", "Folding", "param_shapes"]


@dataclass
class FoldedRun:
    """One folded run: its parent call, the calls of each repeat, and where the nodes of
    its later repeats go (``fold_to``; ``dropped``: parameters with no counterpart)."""

    parent: Optional[str]
    calls: list[list[str]]
    fold_to: dict[str, str] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)


@dataclass
class Folding:
    """What folding decided, for the view builder to apply: a run of single calls is drawn
    by its first call with ``repeats`` (how many), ``last`` (the last call it stands for)
    and ``calls`` (every call it stands for); a run of blocks of several calls by a
    ``group`` cluster (``groups``: how many repeats) around its first block's calls
    (``in_group``: each call's group)."""

    repeats: dict[str, int] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)
    calls: dict[str, list[str]] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    in_group: dict[str, str] = field(default_factory=dict)


def param_shapes(graph: nx.DiGraph) -> dict[str, tuple]:
    """Each layer's parameter shapes: those of the parameters any node inside it used
    (sorted), the same for every call of a module (parameters hang under its first call)."""
    used: dict[str, list] = {}
    for param, target in graph.edges:
        if graph.nodes[param]["kind"] != "param":
            continue
        layer = target if graph.nodes[target]["kind"] == "layer" else graph.nodes[target]["parent"]
        while layer is not None:
            used.setdefault(layer, []).append(graph.nodes[param]["shape"])
            layer = graph.nodes[layer]["parent"]
    return {layer: tuple(sorted(shapes)) for layer, shapes in used.items()}


#: Each recorded graph's signatures (see :meth:`Folder._recorded_signatures`), with the
#: graph's size when they were worked out.
_SIGNED: "weakref.WeakKeyDictionary[nx.DiGraph, tuple[tuple[int, int], dict[str, int]]]" = \
    weakref.WeakKeyDictionary()


class Folder:
    """Finds the runs to fold and maps every node of a later repeat to its first copy."""

    def __init__(self, source: nx.DiGraph, graph: nx.DiGraph, order: list[str],
                 children: dict[Optional[str], list[str]], kind: dict[str, str],
                 boxes: set[str]) -> None:
        self.source, self.graph, self.order = source, graph, order
        self.children, self.kind, self.boxes = children, kind, boxes
        self.fold_to: dict[str, str] = {}
        self.repeat_of: dict[str, dict[int, int]] = {}
        self.dropped: set[str] = set()
        self.runs: list[FoldedRun] = []

    def fold(self, *, inside_repeats: bool = False) -> Folding:
        """Fold every run of identical, chained sibling calls, outermost first, and say
        how they are drawn.

        With ``inside_repeats``, runs inside the later repeats of a folded run are found
        too (each in :attr:`runs`): the report's page unfolds runs one by one."""
        folding = Folding()
        layers = deepest_first(self.graph, self.order, self.kind)
        shapes = param_shapes(self.source)
        inside = self._inside_boxes(shapes)
        label_of = {n: (*self._fold_label(self.graph, n, shapes, n in self.boxes), inside.get(n))
                    for n in self.order}
        signed = signatures(self.children, self.kind, label_of, layers)
        outermost_first = sorted(self.children, key=lambda n: -1 if n is None
                                 else self.graph.nodes[n]["depth"])
        for parent in outermost_first:
            if parent in self.fold_to and not inside_repeats:
                continue  # inside a repeat already drawn by its first copy
            calls = [c for c in self.children[parent] if self.kind[c] == "layer"]
            for found in find_runs([signed[c] for c in calls]):
                links = [chained(self.source, found.repeat(calls, k), found.repeat(calls, k + 1))
                         for k in range(found.count - 1)]
                for run in split_chains(found, links):
                    self._try(folding, parent, calls, run)
        return folding

    def _inside_boxes(self, shapes: dict[str, tuple]) -> dict[str, int]:
        """The signature, in the graph as recorded, of each call that the cut to a depth
        made a box: what a box hides must match too (two blocks that differ only inside,
        a dropout's ``p`` or another order of their ops, are no repeats)."""
        if self.graph is self.source or not self.boxes:
            return {}
        signed = self._recorded_signatures(shapes)
        return {box: signed[box] for box in self.boxes if box in signed}

    def _recorded_signatures(self, shapes: dict[str, tuple]) -> dict[str, int]:
        """:func:`signatures` of every call in the graph as recorded, worked out once per
        graph (a report folds it at every depth)."""
        source = self.source
        size = (source.number_of_nodes(), source.number_of_edges())
        cached = _SIGNED.get(source)
        if cached is not None and cached[0] == size:
            return cached[1]
        order, children, kind = call_tree(source)
        label_of = {n: self._fold_label(source, n, shapes, False) for n in order}
        signed = signatures(children, kind, label_of, deepest_first(source, order, kind))
        _SIGNED[source] = (size, signed)
        return signed

    def _fold_label(self, graph: nx.DiGraph, node: str, shapes: dict[str, tuple],
                    boxed: bool) -> tuple:
        """What must match in ``graph``, besides the children, for two nodes to be repeats
        (in a diff's union also what changed: an added block is not folded into the same
        ones); ``boxed``: whether the node is drawn as a box."""
        attrs = graph.nodes[node]
        status = (attrs.get("diff"), attrs.get("diff_inside"))
        if attrs["kind"] == "tensor":
            return (attrs["shape"], *status)
        if attrs["kind"] != "layer":
            return (attrs.get("name") or attrs.get("shape"), attrs.get("args"), *status)
        boundary = tuple(self.source.nodes[t]["shape"] if t in self.source else None
                         for t in attrs["inputs"] + attrs["outputs"])
        return (attrs["type"], attrs.get("settings"), attrs["num_params"], boundary,
                shapes.get(node, ()), boxed, *status)

    def _try(self, folding: Folding, parent: Optional[str], calls: list[str], run: Run) -> None:
        first, last = run.repeat(calls, 0)[0], run.repeat(calls, run.count - 1)[-1]
        if self._between_calls(parent, first, last):
            return
        repeats = [self._subtree(list(run.repeat(calls, k))) for k in range(run.count)]
        if any(len(nodes) != len(repeats[0]) for nodes in repeats) or not self._closed(repeats):
            return
        block = list(run.repeat(calls, 0))
        self.runs.append(FoldedRun(parent, [list(run.repeat(calls, k))
                                            for k in range(run.count)]))
        self._fold_run(len(self.runs) - 1, repeats)
        if run.period == 1:
            folding.repeats[block[0]], folding.last[block[0]] = run.count, last
            folding.calls[block[0]] = [run.repeat(calls, k)[0] for k in range(run.count)]
        else:
            group = f"group:{block[0]}"
            folding.groups[group] = run.count
            folding.in_group.update((call, group) for call in block)

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

    def _closed(self, repeats: list[list[str]]) -> bool:
        """Whether folding hides nothing: every repeat but the last feeds only itself and
        the next one (no model output, no skip past the run), and a later repeat receives
        from outside only what the first one does."""
        where = {node: k for k, nodes in enumerate(repeats) for node in nodes}
        first_inputs = self._outside_inputs(repeats[0], where)
        for k, nodes in enumerate(repeats):
            for node in nodes:
                if k < len(repeats) - 1 and self._leaks(node, k, where):
                    return False
            if k and not self._outside_inputs(nodes, where) <= first_inputs:
                return False
        return True

    def _leaks(self, node: str, k: int, where: dict[str, int]) -> bool:
        """Whether ``node`` of repeat ``k`` is used past the next repeat (a constant first
        used in the run is an input of every repeat, not something one computed)."""
        role = self.graph.nodes[node].get("role")
        if role == "constant":
            return False
        # a parameter fed (FSDP's unshard box feeds the unit's) is its repeat's own, as
        # the parameters under each repeat are
        return role == "output" or any(where.get(t) not in (k, k + 1)
                                       for t in self.graph.successors(node)
                                       if self.kind[t] != "param")

    def _outside_inputs(self, nodes: list[str], where: dict[str, int]) -> set[str]:
        return {s for node in nodes for s in self.graph.predecessors(node)
                if s not in where and self.kind[s] != "param"}

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

    def _fold_run(self, run_id: int, repeats: list[list[str]]) -> None:
        for node in repeats[0]:
            self.repeat_of.setdefault(node, {})[run_id] = 0
        for k, nodes in enumerate(repeats[1:], start=1):
            for node, counterpart in zip(nodes, repeats[0]):
                if self.graph.nodes[node].get("role") == "output":
                    continue  # a model output stays itself, outside the model
                self.fold_to[node] = self.runs[-1].fold_to[node] = counterpart
                self.repeat_of.setdefault(node, {})[run_id] = k
                self._fold_params(node, counterpart)

    def _fold_params(self, node: str, counterpart: str) -> None:
        """Map the parameters under a folded call to those under its counterpart, by
        position; one without a counterpart is not drawn."""
        own = [c for c in self.children.get(node, ()) if self.kind[c] == "param"]
        theirs = [c for c in self.children.get(counterpart, ()) if self.kind[c] == "param"]
        for index, param in enumerate(own):
            if index < len(theirs):
                self.fold_to[param] = self.runs[-1].fold_to[param] = theirs[index]
            else:
                self.dropped.add(param)
                self.runs[-1].dropped.add(param)

    def canonical(self, node: Any) -> Any:
        """The node that draws ``node``: its counterpart in the first repeat of every run
        it was folded into (runs nest: a stage's blocks inside repeated stages)."""
        while node in self.fold_to:
            node = self.fold_to[node]
        return node

    def inside_one_run(self, source: str, target: str) -> bool:
        """Whether the edge runs within or between the repeats of a folded run, where the
        first repeat stands for all of them."""
        runs_of_source, runs_of_target = self.repeat_of.get(source), self.repeat_of.get(target)
        if not runs_of_source or not runs_of_target:
            return False
        return any(runs_of_source[run] != runs_of_target[run] or runs_of_source[run] > 0
                   for run in runs_of_source.keys() & runs_of_target.keys())
