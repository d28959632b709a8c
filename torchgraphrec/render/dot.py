"""DOT text (and pydot graphs) from a recorded graph: nested clusters, themed, deterministic."""

from __future__ import annotations

from typing import Any

import graphviz
import networkx as nx

from torchgraphrec.render import labels
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.view import View, build_view

__all__ = ["to_dot", "to_digraph", "to_pydot"]


def to_digraph(graph: nx.DiGraph, **options: Any) -> graphviz.Digraph:
    """The drawing of ``graph`` as a :class:`graphviz.Digraph` (not rendered)."""
    settings = RenderOptions.of(options)
    return _DotWriter(build_view(graph, settings), settings).write()


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
    import pydot

    (dot,) = pydot.graph_from_dot_data(to_dot(graph, **options))
    return dot


class _DotWriter:
    def __init__(self, view: View, options: RenderOptions) -> None:
        self.view, self.options, self.theme = view, options, options.style
        self.names: dict[str, str] = {}

    def write(self) -> graphviz.Digraph:
        theme = self.theme
        root = graphviz.Digraph(
            name=labels.escape(self.view.source.graph.get("model", "model")),
            graph_attr={**theme.graph, "rankdir": self.options.rankdir, "compound": "true"},
            node_attr=dict(theme.node), edge_attr=dict(theme.edge))
        bodies = self._cluster_bodies()
        for node in self.view.nodes:
            self._node(bodies.get(self.view.parent.get(node), root), node)
        self._nest(root, bodies)
        for (source, target), count in self.view.edges.items():
            root.edge(self.names[source], self.names[target], **self._edge_attrs(source, target,
                                                                              count))
        return root

    def _cluster_bodies(self) -> dict[str, graphviz.Digraph]:
        bodies = {}
        for index, cluster in enumerate(list(self.view.groups) + self.view.clusters):
            attrs = self._cluster_attrs(cluster)
            bodies[cluster] = graphviz.Digraph(name=f"cluster_{index}", graph_attr=attrs)
        return bodies

    def _cluster_attrs(self, cluster: str) -> dict[str, str]:
        if cluster in self.view.groups:
            return {**self.theme.repeat_cluster, "label": f"× {self.view.groups[cluster]}",
                    "id": labels.xml_id("g", cluster), "class": "tgr-repeat"}
        attrs = self.view.folded.nodes[cluster]
        title = labels.layer_title(attrs)
        repeats = self.view.repeats.get(cluster, 1)
        return {**self.theme.cluster, "label": labels.join(
                    f"{title}  × {repeats}" if repeats > 1 else title),
                "id": labels.xml_id("c", cluster), "class": f"tgr-cluster tgr-{attrs['type']}"}

    def _nest(self, root: graphviz.Digraph, bodies: dict[str, graphviz.Digraph]) -> None:
        """Attach each cluster to its parent, innermost first (a cluster's text is copied
        into its parent when attached, so it must be complete by then)."""
        depth: dict[str, int] = {}
        for cluster in bodies:
            chain, node = 0, self.view.parent.get(cluster)
            while node is not None:
                chain, node = chain + 1, self.view.parent.get(node)
            depth[cluster] = chain
        order = sorted(bodies, key=lambda c: (-depth[c], self._position(c)))
        for cluster in order:
            parent = self.view.parent.get(cluster)
            (bodies[parent] if parent is not None else root).subgraph(bodies[cluster])

    def _position(self, cluster: str) -> int:
        node = cluster.removeprefix("group:")
        return self.view.folded.nodes[node]["seq"]

    def _node(self, body: graphviz.Digraph, node: str) -> None:
        name = self.names[node] = f"n{len(self.names)}"
        attrs = self.view.folded.nodes[node]
        kind = self.view.kind(node)
        style = {"box": self.theme.layer, "param": self.theme.param, "op": self.theme.op,
                 "tensor": self.theme.model_tensor if attrs.get("role") in ("input", "output")
                 else self.theme.tensor}[kind]
        body.node(name, label=self._label(node, attrs, kind), id=labels.xml_id("n", node),
                  **{"class": f"tgr-{kind}"}, **style)

    def _label(self, node: str, attrs: dict, kind: str) -> Any:
        show = self.options.show_shapes
        if kind == "box":
            return labels.box_label(attrs, self.view.source, show, self.view.repeats.get(node, 1))
        if kind == "tensor":
            return labels.tensor_label(attrs, show)
        if kind == "param":
            return labels.param_label(attrs, show)
        return labels.op_label(attrs)

    def _edge_attrs(self, source: str, target: str, count: int) -> dict[str, str]:
        kind = "param" if self.view.kind(source) == "param" else "flow"
        edge_id = f"{labels.xml_id('e', source)}-{labels.xml_id('', target)}"
        attrs = {"id": edge_id, "class": f"tgr-{kind}"}
        if kind == "param":
            attrs.update(style="dashed", arrowhead="none")
        if count > 1:
            attrs["label"] = f"×{count}"
        return attrs
