"""The drawing description the report's page composes DOT from: Python decides, the page picks.

Every label, style, fold and placement rule stays here and in the DOT writer: the page
receives each element's DOT fragments in every form it can take (a box, a cluster, the
``× N`` forms of a folded run), the module tree, the runs with the cuts at which Python
folds them, and the leaf-level edges; its composer (``templates/compose.js``) only picks a
form per element for the state the reader chose and lifts edges to what is drawn. For the
states a static drawing can express, it writes the same DOT as :func:`~torchgraphrec.to_dot`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import networkx as nx

from torchgraphrec.render.dot import _TITLE_GAP, _DotWriter
from torchgraphrec.render.folding import FoldedRun
from torchgraphrec.render.labels import css_class
from torchgraphrec.render.metrics import text_width
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.passthrough import wire_pass_through
from torchgraphrec.render.runs import find_all_runs
from torchgraphrec.render.texts import cluster_text
from torchgraphrec.render.view import View, build_view

__all__ = ["describe", "opening_depth", "KIND_LETTERS"]

#: One letter per drawn kind; ``M`` is a tensor the model received or returned.
KIND_LETTERS = {"layer": "L", "tensor": "T", "param": "P", "op": "O"}


def opening_depth(graph: nx.DiGraph, options: RenderOptions) -> Optional[int]:
    """The depth the static drawing uses (``"auto"`` resolved): the page opens there.

    >>> import torch, torchgraphrec
    >>> rec = torchgraphrec.record(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2))
    >>> opening_depth(rec.graph, RenderOptions()) is None
    True
    """
    return build_view(graph, options).depth


class _Describer:
    """Writes the description of one graph under one set of options."""

    def __init__(self, graph: nx.DiGraph, options: RenderOptions) -> None:
        self.options = replace(options, color_by=None)  # the page colours by itself
        self.graph = wire_pass_through(graph)
        self.order = sorted(self.graph.nodes, key=lambda n: self.graph.nodes[n]["seq"])
        self.index = {node: i for i, node in enumerate(self.order)}
        self.view = View(self.graph, self.graph, None)
        for node in self.order:
            attrs = self.graph.nodes[node]
            self.view.parent[node] = None if attrs.get("role") == "output" else attrs["parent"]
        self.writer = _DotWriter(self.view, self.options)
        self.writer.scale = None
        self.children: dict[Optional[str], list[str]] = {}
        for node in self.order:
            self.children.setdefault(self.graph.nodes[node]["parent"], []).append(node)

    def head(self) -> str:
        empty = _DotWriter(View(self.graph, self.graph, None), self.options).write().source
        return empty[:empty.rindex("}")]

    def title_width(self, cluster: str) -> float:
        """Points a cluster's title needs left of its entry node (see the DOT writer)."""
        theme = self.options.style
        size = float((theme.repeat_cluster if cluster in self.view.groups
                      else theme.cluster).get("fontsize", "11"))
        font = theme.graph.get("fontname", "Helvetica")
        return text_width(cluster_text(self.view, cluster)[0], font, size) + _TITLE_GAP

    def forms(self, node: str) -> dict[str, Any]:
        """A node's box form (own attributes, width) and, for a call with children, its
        cluster form (attributes, title width)."""
        own, extra, _ = self.writer.node_parts(node)
        found: dict[str, Any] = {"own": own, "extra": extra, "width": self.writer.widths[node]}
        if self.graph.nodes[node]["kind"] == "layer" and self.children.get(node):
            found["cluster"] = self.writer._cluster_attrs(node)  # the writer's own text
            found["title"] = self.title_width(node)
        return found

    def needs(self, node: str) -> int:
        """2: drawn as a cluster whenever open; 1: only while leaves are opened; 0: a box."""
        kinds = {self.graph.nodes[c]["kind"] for c in self.children.get(node, ())}
        return 2 if "layer" in kinds else 1 if "op" in kinds else 0

    def edges(self) -> tuple[list[int], list[str]]:
        """Leaf-level edges in ``seq`` order, flat, with their diff status. An edge out of a
        model output comes from what made it: the output node stays the drawing's end."""
        graph, index = self.graph, self.index
        flat, status = [], []
        for source, target, attrs in sorted(graph.edges(data=True), key=lambda e: e[2]["seq"]):
            sources = list(graph.predecessors(source)) \
                if graph.nodes[source].get("role") == "output" else [source]
            for tail in sources:
                flat += [index[tail], index[target]]
                status.append(attrs.get("diff", "same"))
        return flat, status

    def unproduced(self) -> list[int]:
        """Tensors that only their own call made (recorded without ops): drawn where they
        were made whenever that call is drawn as a cluster."""
        if self.graph.graph.get("ops") != "none":
            return []
        graph = self.graph
        return [self.index[n] for n in self.order if graph.nodes[n]["kind"] == "tensor"
                and graph.nodes[n]["role"] != "input" and graph.nodes[n]["parent"] is not None
                and set(graph.predecessors(n)) <= {graph.nodes[n]["parent"]}]

    def run_forms(self, run: FoldedRun) -> dict[str, Any]:
        """The ``× N`` forms of a run: the first call as a box and as a cluster (one call
        a repeat), or the group cluster around the first repeat (several)."""
        view, first = self.view, run.calls[0][0]
        if len(run.calls[0]) > 1:
            group = f"group:{first}"
            view.groups[group] = len(run.calls)
            found = {"group": self.writer._cluster_attrs(group), "title": self.title_width(group)}
            del view.groups[group]
            return found
        view.repeats[first], view.last[first] = len(run.calls), run.calls[-1][0]
        found = {key: value for key, value in self.forms(first).items()}
        del view.repeats[first], view.last[first]
        return found

    def describe(self) -> dict[str, Any]:
        graph, index, order = self.graph, self.index, self.order
        head = self.head()
        forms = [self.forms(node) for node in order]
        kinds = "".join("M" if graph.nodes[n].get("role") in ("input", "output")
                        else KIND_LETTERS[graph.nodes[n]["kind"]] for n in order)
        edges, status = self.edges()
        runs = []
        for run, valid in find_all_runs(graph, self.options):
            entry = {"parent": index.get(run.parent, -1), "period": len(run.calls[0]),
                     "calls": [index[c] for calls in run.calls for c in calls],
                     "valid": valid, **self.run_forms(run),
                     "fold": [index[n] for pair in sorted(run.fold_to.items()) for n in pair],
                     "dropped": sorted(index[n] for n in run.dropped)}
            runs.append(entry)
        return {
            "head": head, "styles": dict(self.writer.styles),
            "ids": order, "xid": [css_class(n) for n in order],
            "parent": [index.get(graph.nodes[n]["parent"], -1) for n in order],
            "depth": [graph.nodes[n]["depth"] for n in order], "kind": kinds,
            "own": [f["own"] for f in forms], "extra": [f["extra"] for f in forms],
            "width": [f["width"] for f in forms],
            "cluster": {i: f["cluster"] for i, f in enumerate(forms) if "cluster" in f},
            "title": {i: f["title"] for i, f in enumerate(forms) if "title" in f},
            "needs": {i: self.needs(n) for i, n in enumerate(order) if self.needs(n)},
            "out": [index[n] for n in order if graph.nodes[n].get("role") == "output"],
            "unproduced": self.unproduced(), "edges": edges,
            "edge_status": status if any(s != "same" for s in status) else None,
            "runs": runs,
        }


def describe(graph: nx.DiGraph, options: RenderOptions) -> dict[str, Any]:
    """The drawing description of ``graph`` under ``options`` (``depth`` aside: the page
    opens and closes calls itself), as JSON-ready values.

    Nodes are numbered in ``seq`` order; every list is indexed by that number. The page's
    composer turns it and a state (open calls, unfolded runs, kinds shown, direction) into
    DOT.

    >>> import torch, torchgraphrec
    >>> rec = torchgraphrec.record(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2))
    >>> data = describe(rec.graph, RenderOptions())
    >>> data["kind"], data["ids"][1], data["head"].splitlines()[0]
    ('MLLOPPM', 'layer:#0', 'digraph Sequential {')
    """
    return _Describer(graph, options).describe()
