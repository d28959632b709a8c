"""The folded runs of every cut: which repeats the report's page may draw once, and when."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import networkx as nx

from torchgraphrec.render.folding import Folder, FoldedRun
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.view import folder_at

__all__ = ["find_all_runs", "reach"]


def reach(folder: Folder, boxes: set[str], calls: list[str]) -> int:
    """How deep a drawing of ``calls`` goes: the deepest call drawn as a box (its depth),
    or as a cluster (its depth + 1), among them and everything drawn inside them.

    The page computes the same number for the state the reader chose, and folds a run
    only where Python folded it at a cut of that reach."""
    deepest, stack = -1, list(calls)
    while stack:
        node = stack.pop()
        if folder.kind[node] != "layer":
            continue
        depth = folder.graph.nodes[node]["depth"]
        deepest = max(deepest, depth if node in boxes else depth + 1)
        stack.extend(folder.children.get(node, ()))
    return deepest


def _cuts(graph: nx.DiGraph) -> list[Optional[int]]:
    deepest = max((a["depth"] for _, a in graph.nodes(data=True) if a["kind"] == "layer"),
                  default=0)
    return [*range(deepest + 1), None]


def _position(graph: nx.DiGraph, run: FoldedRun) -> tuple:
    """Where the DOT writer meets the run: outermost parents first (in the order their
    first child ran), then left to right."""
    parent = run.parent
    depth = -1 if parent is None else graph.nodes[parent]["depth"]
    first_child = min((a["seq"] for _, a in graph.nodes(data=True) if a["parent"] == parent),
                      default=-1) if parent is not None else -1
    return depth, first_child, graph.nodes[run.calls[0][0]]["seq"]


def find_all_runs(wired: nx.DiGraph, options: RenderOptions) -> list[tuple[FoldedRun, dict]]:
    """Every run found at some cut (a depth, or none), with or without leaves opened,
    each once with the reaches at which it folds: ``{"0": [...], "1": [...]}`` (leaves
    closed, opened). Later repeats map onto the first as at the deepest cut that folds it.
    Found whether or not ``options.fold_repeats`` is set: the page folds and unfolds.
    """
    found: dict[tuple, tuple[FoldedRun, dict]] = {}
    for leaves in (False, True):
        for cut in _cuts(wired):
            folder, boxes = folder_at(wired, replace(options, depth=cut, expand_leaves=leaves))
            for run in folder.runs:
                key = tuple(tuple(calls) for calls in run.calls)
                kept, valid = found.setdefault(key, (run, {"0": [], "1": []}))
                reached = reach(folder, boxes, run.calls[0])
                if reached not in valid[str(int(leaves))]:
                    valid[str(int(leaves))].append(reached)
                if len(run.fold_to) > len(kept.fold_to):  # the deepest cut maps the most
                    kept.fold_to.update(run.fold_to)
                    kept.dropped |= run.dropped
    return sorted(found.values(), key=lambda item: _position(wired, item[0]))
