"""The drawing description the report's page composes DOT from: Python decides, the page picks.

Every label, style, fold and placement rule stays here and in the DOT writer: the page
receives each element's DOT fragments in every form it can take (a box, a cluster, the
``× N`` forms of a folded run), the module tree, the runs with the cuts at which Python
folds them, and the leaf-level edges; its composer (``templates/compose.js``) only picks a
form per element for the state the reader chose and lifts edges to what is drawn. For the
states a static drawing can express, it writes the same DOT as :func:`~torchgraphrec.to_dot`.
A diff's union also carries its marks (each element's status in either form, the edges'
styles, the legend's rows) and the plain forms of either side.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import networkx as nx

from torchgraphrec.render.dot import drawn_view
from torchgraphrec.render.writer import DotWriter, attr_text
from torchgraphrec.render.edges import MAX_FANOUT
from torchgraphrec.render.folding import FoldedRun
from torchgraphrec.render.labels import id_part
from torchgraphrec.render.legend import legend_lines, text_row
from torchgraphrec.render.marks import is_diff, styled
from torchgraphrec.render.options import RANKDIRS, RenderOptions
from torchgraphrec.render.oproles import RESHAPE, ROLES, SIDE_ROLES, argument_roles, \
    is_bridged, is_identity, role_labels
from torchgraphrec.render.passthrough import wire_pass_through
from torchgraphrec.report.runs import find_all_runs
from torchgraphrec.render.scale import TITLES, value_of
from torchgraphrec.render.sides import old_side, plain
from torchgraphrec.render.texts import cost_names
from torchgraphrec.render.unshard import BOX, INTO, add_unshard
from torchgraphrec.render.view import View

__all__ = ["describe", "drawn_graph", "opening_depth", "KIND_LETTERS", "STATUSES"]

#: One letter per drawn kind; ``M`` is a tensor the model received or returned.
KIND_LETTERS = {"layer": "L", "tensor": "T", "param": "P", "op": "O"}
#: A diff's statuses of drawn elements, in the order its legend lists them.
STATUSES = ("added", "removed", "changed", "inside", "same")


def opening_depth(graph: nx.DiGraph, options: RenderOptions) -> Optional[int]:
    """The depth the static drawing uses (``"auto"`` resolved): the page opens there.

    >>> import torch, torchgraphrec
    >>> rec = torchgraphrec.record(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2))
    >>> opening_depth(rec.graph, RenderOptions()) is None
    True
    """
    return drawn_view(graph, options).depth


def drawn_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph a description numbers: ``graph`` with pass-through calls on the flow and
    FSDP's unshard boxes added (a copy where either changes it). Whatever the page reads by
    node number comes from it: the boxes are nodes only it has.

    >>> import torch, torchgraphrec
    >>> rec = torchgraphrec.record(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2))
    >>> drawn_graph(rec.graph) is rec.graph
    True
    """
    return add_unshard(wire_pass_through(graph))


class _Describer:
    """Writes the fragments of one graph under one set of options. Layers are written as
    boxes by a writer that sees every layer drawn as a box, and as clusters by one that
    sees none so: a diff marks a box by what changed inside it, a cluster by itself."""

    def __init__(self, graph: nx.DiGraph, options: RenderOptions) -> None:
        self.options = replace(options, color_by=None)  # the page colours by itself
        self.graph = drawn_graph(graph)
        self.order = sorted(self.graph.nodes, key=lambda n: self.graph.nodes[n]["seq"])
        self.index = {node: i for i, node in enumerate(self.order)}
        self.children: dict[Optional[str], list[str]] = {}
        for node in self.order:
            self.children.setdefault(self.graph.nodes[node]["parent"], []).append(node)
        self.views = [self._view([]), self._view([n for n in self.order
                                                  if self.graph.nodes[n]["kind"] == "layer"])]
        self.writer, self.boxes = (self._writer(view) for view in self.views)

    def _view(self, boxes: list[str]) -> View:
        view = View(self.graph, self.graph, None, nodes=boxes)
        for node in self.order:
            attrs = self.graph.nodes[node]
            view.parent[node] = None if attrs.get("role") == "output" else attrs["parent"]
        return view

    def _writer(self, view: View) -> DotWriter:
        writer = DotWriter(view, self.options)
        writer.scale = None
        return writer

    def head(self) -> str:
        drawn = plain(self.graph)  # a diff's legend would follow the head: it is the page's
        empty = DotWriter(View(drawn, drawn, None), self.options).write().source
        return empty[:empty.rindex("}")]

    def title_width(self, cluster: str) -> float:
        """Points a cluster's title needs left of its entry node (see the DOT writer)."""
        return self.writer.title_width(cluster)

    def forms(self, node: str) -> dict[str, Any]:
        """A node's box form (own attributes, style, width) and, for a call with children,
        its cluster form (attributes, title width)."""
        is_layer = self.graph.nodes[node]["kind"] == "layer"
        writer = self.boxes if is_layer else self.writer
        own, themed, extra, _ = writer.node_parts(node)
        found: dict[str, Any] = {"own": own, "themed": themed, "extra": extra,
                                 "width": writer.widths[node]}
        if is_layer and self.children.get(node):
            found["cluster"] = self.writer.cluster_attrs(node)  # the writer's own text
            found["title"] = self.title_width(node)
        return found

    def run_forms(self, run: FoldedRun) -> dict[str, Any]:
        """The ``× N`` forms of a run: the first call as a box and as a cluster (one call
        a repeat), or the group cluster around the first repeat (several)."""
        first = run.calls[0][0]
        if len(run.calls[0]) > 1:
            group = f"group:{first}"
            self.writer.view.groups[group] = len(run.calls)
            found = {"group": self.writer.cluster_attrs(group), "title": self.title_width(group)}
            del self.writer.view.groups[group]
            return found
        for view in self.views:
            view.repeats[first], view.last[first] = len(run.calls), run.calls[-1][0]
            view.calls[first] = [calls[0] for calls in run.calls]
        found = self.forms(first)
        for view in self.views:
            del view.repeats[first], view.last[first], view.calls[first]
        return found

    def form_arrays(self, runs: list[FoldedRun]) -> dict[str, Any]:
        """Every node's forms as arrays indexed by node number, and every run's."""
        forms = [self.forms(node) for node in self.order]
        found = {key: [f[key] for f in forms] for key in ("own", "extra", "width")}
        found["cluster"] = {i: f["cluster"] for i, f in enumerate(forms) if "cluster" in f}
        found["title"] = {i: f["title"] for i, f in enumerate(forms) if "title" in f}
        found["runs"] = [self.run_forms(run) for run in runs]
        if self.writer.marks is not None:
            found["themed"] = [f["themed"] for f in forms]
        return found

    def needs(self, node: str) -> int:
        """2: drawn as a cluster whenever open; 1: only while leaves are opened; 0: a box."""
        kinds = {self.graph.nodes[c]["kind"] for c in self.children.get(node, ())}
        return 2 if "layer" in kinds else 1 if "op" in kinds else 0

    def edges(self) -> tuple[list[int], list[str], dict[int, str]]:
        """Leaf-level edges in ``seq`` order, flat, with their diff status and the roles of
        those into attention (by edge number). An edge out of a model output comes from what
        made it: the output node stays the drawing's end."""
        graph, index = self.graph, self.index
        roles = argument_roles(graph)
        flat, status, role = [], [], {}
        for source, target, attrs in sorted(graph.edges(data=True), key=lambda e: e[2]["seq"]):
            sources = list(graph.predecessors(source)) \
                if graph.nodes[source].get("role") == "output" else [source]
            for tail in sources:
                if (tail, target) in roles:
                    role[len(status)] = roles[tail, target]
                flat += [index[tail], index[target]]
                status.append(attrs.get("diff", "same"))
        return flat, status, role

    def edge_rules(self) -> dict[str, Any]:
        """What the composer needs to draw edges as the view does (render/view.py,
        render/edges.py): the ops bridged by an edge (a chain of layout-only ops is one
        edge labelled ``reshape``; identity wrappers, ``unlabelled``, add no label), each label's attribute by ``rankdir``, the roles the main path does
        not enter attention by, and the shared-input markers' limit, texts (a table and
        each node's entry in it) and style."""
        names: dict[str, int] = {}
        marker = [names.setdefault(self.writer.marker_label(n), len(names)) for n in self.order]
        role_names = role_labels()
        nodes = self.graph.nodes
        return {"layout": [i for i, n in enumerate(self.order) if is_bridged(nodes[n])],
                "unlabelled": [i for i, n in enumerate(self.order) if is_identity(nodes[n])],
                "reshape": RESHAPE,
                "labels": {rankdir: {label: DotWriter.label_attr(label, rankdir)
                                     for label in (RESHAPE, *role_names)} for rankdir in RANKDIRS},
                "role_rank": {role: rank for roles in ROLES.values()
                              for rank, role in enumerate(roles)},
                "side_roles": sorted(SIDE_ROLES),
                "fan_out": MAX_FANOUT, "marker_names": list(names), "marker": marker,
                "marker_style": self.writer.marker_style}

    def unproduced(self) -> list[int]:
        """Tensors that only their own call made (recorded without ops): drawn where they
        were made whenever that call is drawn as a cluster."""
        if self.graph.graph.get("ops") != "none":
            return []
        graph = self.graph
        return [self.index[n] for n in self.order if graph.nodes[n]["kind"] == "tensor"
                and graph.nodes[n]["role"] != "input" and graph.nodes[n]["parent"] is not None
                and set(graph.predecessors(n)) <= {graph.nodes[n]["parent"]}]

    def unshard(self) -> dict[str, list[int]]:
        """FSDP's unshard boxes (:mod:`~torchgraphrec.render.unshard`) and, in flat pairs,
        each node folded into one with its box: the page draws the nodes as their box,
        and the boxes not at all, as the view does for each ``include_ops``."""
        nodes, index = self.graph.nodes, self.index
        return {"into": [i for n in self.order if INTO in nodes[n]
                         for i in (index[n], index[nodes[n][INTO]])],
                "boxes": [index[n] for n in self.order if BOX in nodes[n]]}

    def legend(self) -> dict[str, Any]:
        """What the legend may hold: each diff status's row (shown where drawn), the mode
        row, and with ``show_costs`` the costs written and the nodes that have each."""
        before, after = legend_lines([text_row("\0")])[0].split(text_row("\0"))
        found: dict[str, Any] = {"line": [before, after], "statuses": [], "mode": []}
        marks = self.writer.marks
        if marks is not None:
            for status in STATUSES:
                marks.seen = {status}
                found["statuses"].append([status, marks.legend_rows()[0]])
            marks.seen = set()
            found["mode"] = marks.legend_rows()
        if self.options.show_costs:
            found["costs_row"] = text_row("costs: \0").split("\0")
            found["costs"] = [[TITLES.get(name, name),
                               [i for i, n in enumerate(self.order)
                                if value_of(self.graph.nodes[n], name)]]
                              for name in cost_names(self.options)]
        return found

    def marks(self) -> dict[str, Any]:
        """Each node's status as a box and, for a call with children, as a cluster, and
        each edge status's attributes on flow and parameter edges."""
        theme = self.options.style
        edge = {kind: {status: " " + attr_text(styled(base, theme.diff_edge[status]))[2:-1]
                       for status in STATUSES if status in theme.diff_edge}
                for kind, base in (("flow", {}), ("param", {"style": "dashed"}))}
        return {"box": [(self.boxes if self.graph.nodes[n]["kind"] == "layer" else self.writer)
                        .marks.status(n) for n in self.order],
                "cluster": {i: self.writer.marks.status(n) for i, n in enumerate(self.order)
                            if self.children.get(n) and self.graph.nodes[n]["kind"] == "layer"},
                "edge": edge}

    def describe(self) -> dict[str, Any]:
        graph, index, order = self.graph, self.index, self.order
        kinds = "".join("M" if graph.nodes[n].get("role") in ("input", "output")
                        else KIND_LETTERS[graph.nodes[n]["kind"]] for n in order)
        edges, status, roles = self.edges()
        runs, forms = self.runs_and_forms(index)
        found = {
            "head": self.head(), "styles": dict(self.writer.styles),
            "ids": order, "xid": [id_part(n) for n in order],
            "parent": [index.get(graph.nodes[n]["parent"], -1) for n in order],
            "depth": [graph.nodes[n]["depth"] for n in order], "kind": kinds, **forms,
            "needs": {i: self.needs(n) for i, n in enumerate(order) if self.needs(n)},
            "out": [index[n] for n in order if graph.nodes[n].get("role") == "output"],
            "unproduced": self.unproduced(), "edges": edges,
            "edge_status": status if any(s != "same" for s in status) else None,
            "roles": roles, **self.edge_rules(), "runs": runs, "legend": self.legend(),
            "unshard": self.unshard(),
        }
        if self.writer.marks is not None:
            found["mark"] = self.marks()
            found["status"] = [graph.nodes[n].get("diff", "same") for n in order]
            found["sides"] = {side: self.side(drawn, absent) for side, drawn, absent in
                              (("a", old_side(graph), "added"), ("b", graph, "removed"))}
        return found

    def runs_and_forms(self, index: dict[str, int]) -> tuple[list[dict], dict[str, Any]]:
        """The runs this graph folds (node numbers from ``index``), each with its ``× N``
        forms, and every node's forms (numbered in this graph's own order)."""
        found_runs = find_all_runs(self.graph, self.options)
        runs = [{"parent": index.get(run.parent, -1), "period": len(run.calls[0]),
                 "calls": [index[c] for calls in run.calls for c in calls], "valid": valid,
                 "fold": [index[n] for pair in sorted(run.fold_to.items()) for n in pair],
                 "dropped": sorted(index[n] for n in run.dropped)}
                for run, valid in found_runs]
        forms = self.form_arrays([run for run, _ in found_runs])
        for run, run_forms in zip(runs, forms.pop("runs")):
            run.update(run_forms)
        return runs, forms

    def side(self, drawn: nx.DiGraph, absent: str) -> dict[str, Any]:
        """One side of a diff alone: each node's forms as the union's plain copy writes
        them (``drawn``: the side's attributes), and the runs that side's own recording
        folds, found without what it lacks (``absent``: the status of the nodes it has
        not) and without statuses: GPT-2's ``h.0–2 × 3`` on the side with three blocks,
        where the union keeps the added block apart. Numbered as the union is."""
        kept = plain(drawn).subgraph(n for n, a in drawn.nodes(data=True)
                                     if a.get("diff") != absent).copy()
        kept.remove_edges_from([(s, t) for s, t, status in kept.edges(data="diff")
                                if status == absent])
        for attrs in [*(a for _, a in kept.nodes(data=True)),
                      *(a for *_, a in kept.edges(data=True))]:
            for key in [k for k in attrs if k.startswith("diff")]:
                del attrs[key]
        runs, _ = _Describer(kept, self.options).runs_and_forms(self.index)
        found = _Describer(plain(drawn), self.options).form_arrays([])
        found["runs"] = runs
        return found


def describe(graph: nx.DiGraph, options: RenderOptions) -> dict[str, Any]:
    """The drawing description of ``graph`` under ``options`` (``depth`` aside: the page
    opens and closes calls itself), as JSON-ready values.

    Nodes are numbered in ``seq`` order; every list is indexed by that number. The page's
    composer turns it and a state (open calls, unfolded runs, kinds shown, direction, the
    side of a diff) into DOT.

    >>> import torch, torchgraphrec
    >>> rec = torchgraphrec.record(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2))
    >>> data = describe(rec.graph, RenderOptions())
    >>> data["kind"], data["ids"][1], data["head"].splitlines()[0]
    ('MLLPPOM', 'layer:#0', 'digraph Sequential {')
    """
    if is_diff(graph) and options.color_by is not None:
        raise ValueError(f"color_by={options.color_by!r} cannot be drawn on a diff: its "
                         "colours say what was added, removed and changed")
    return _Describer(graph, options).describe()
