"""The DOT writer: a view's nested clusters, nodes and edges, themed, deterministic."""

from __future__ import annotations

from typing import Any, Mapping

import graphviz
from graphviz.quoting import attr_list, quote

from torchgraphrec.errors import warn
from torchgraphrec.render import labels
from torchgraphrec.render.marks import DiffMarks, is_diff, styled
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.oproles import ROLE_PORTS, ROLES
from torchgraphrec.render.metrics import needs_width, text_width
from torchgraphrec.render.spine import entries, role_rows, spine, under_params
from torchgraphrec.render.legend import costs_row, legend_lines
from torchgraphrec.render.texts import cluster_costs, cluster_text, cost_names, node_text, \
    own_params_lines
from torchgraphrec.render.scale import INCLUSIVE, ColorScale, colorable, value_of
from torchgraphrec.render.view import View

__all__ = ["DotWriter", "attr_text"]


#: Points kept free between a cluster's title and the middle of its entry node.
_TITLE_GAP = 12.0


def attr_text(values: Mapping[str, Any]) -> str:
    """`` [a=1 b="x y"]`` with every key and value quoted by the graphviz package."""
    return attr_list(attributes=values)


class DotWriter:
    """Writes the view's lines: themed attributes are quoted once per kind, not per node.

    Besides :meth:`write`, the report's page takes fragments from it: :meth:`node_parts`,
    :meth:`cluster_attrs`, :meth:`title_width` and :attr:`styles`."""

    def __init__(self, view: View, options: RenderOptions) -> None:
        self.view, self.options, self.theme = view, options, options.style
        self.names: dict[str, str] = {}
        theme = self.theme
        self.kinds = {"box": theme.layer, "param": theme.param, "op": theme.op,
                      "tensor": theme.tensor, "model_tensor": theme.model_tensor}
        self.styles = {kind: attr_text(style)[2:-1] for kind, style in self.kinds.items()}
        self.marks = DiffMarks(view, theme) if is_diff(view.source) else None
        if self.marks is not None and options.color_by is not None:
            raise ValueError(f"color_by={options.color_by!r} cannot be drawn on a diff: its "
                             "colours say what was added, removed and changed")
        self.fonts = {kind: (style.get("fontname", theme.node["fontname"]),
                             float(style.get("fontsize", theme.node["fontsize"])))
                      for kind, style in (("box", theme.layer), ("param", theme.param),
                                          ("op", theme.op), ("tensor", theme.tensor),
                                          ("model_tensor", theme.model_tensor))}
        clusters = list(self.view.groups) + self.view.clusters
        self.cluster_names = {cluster: f"cluster_{index}" for index, cluster in enumerate(clusters)}
        self.spine = spine(view)
        self.on_spine = set(self.spine)
        self.margin = float(theme.node.get("margin", "0.11").split(",")[0])  # inches, each side
        self.widths: dict[str, float] = {}  # points, as each node's label needs
        self.under = under_params(self.view)

    def write(self) -> graphviz.Digraph:
        theme = self.theme
        root = graphviz.Digraph(
            name=labels.escape(self.view.source.graph.get("model", "model")),
            # no second crossing pass over the whole graph once clusters are in place: it
            # reorders a cluster's rows against their flat edges (attention's q, k, v)
            graph_attr={**theme.graph, "rankdir": self.options.rankdir, "compound": "true",
                        "remincross": "false"},
            node_attr=dict(theme.node), edge_attr=dict(theme.edge))
        self.scale = self._value_scale()
        bodies: dict[str | None, list[str]] = {None: root.body}
        for cluster in self.cluster_names:
            bodies[cluster] = []
        for node in self.view.nodes:
            bodies[self.view.parent.get(node)].append(self._node_line(node))
        for cluster, lines in self._spacers().items():
            bodies[cluster] += lines
        for cluster, rows in role_rows(self.view).items():
            bodies[cluster] += [self.role_row(row) for row in rows]
        self.inside = self.view.inside()
        marker_edges = self._markers(bodies)
        self._nest(bodies)
        root.body += [self._edge_line(source, target) for source, target in self.view.edges]
        root.body += marker_edges

        root.body += [f"\t{self.names[a]} -> {self.names[b]} [style=invis]\n"
                      for a, b in self.view.order]
        root.body += self._legend()
        return root

    def _markers(self, bodies: dict[str | None, list[str]]) -> list[str]:
        """A small marker naming a shared input beside each node it feeds but the first
        (see :attr:`View.markers <torchgraphrec.render.view.View.markers>`), put in that
        node's cluster; returns the markers' edges."""
        edges = []
        for index, (source, target) in enumerate(self.view.markers):
            name = f"m{index}"
            bodies[self.view.parent.get(target)].append(
                f"\t{name} [label={self.marker_label(source)} class=\"tgr-marker\" "
                f"id=\"{labels.xml_id('m', source)}-{index}\" {self.marker_style}]\n")
            head, head_attr = self._end(target, last=False)
            edges.append(f"\t{name} -> {head} [class=\"tgr-flow\"{head_attr}]\n")
        return edges

    @property
    def marker_style(self) -> str:
        """A marker's themed attributes: a parameter's, dashed."""
        return attr_text({**self.theme.param, "style": "rounded,dashed,filled"})[2:-1]

    def marker_label(self, source: str) -> str:
        """What a marker says, quoted: the name of the node it stands for."""
        attrs = self.view.folded.nodes[source]
        if attrs["kind"] == "layer":
            text = attrs["qualname"].rpartition(".")[2] or attrs["type"]
        else:
            text = attrs.get("name") or attrs.get("qualname", "").rpartition(".")[2] or "tensor"
        return quote(labels.join(text))

    def role_row(self, row: list[str]) -> str:
        """Boxes that make an op's role arguments (q, k, v) on one rank, in role order: an
        invisible edge from each to the next puts it before the next, left of it where the
        flow runs down or up, but below it where the flow runs sideways, so there the row is
        written backwards to read q, k, v from the top, as the arguments enter the op."""
        if self.options.rankdir in ("LR", "RL"):
            row = row[::-1]
        return "\t{rank=same; " + " -> ".join(self.names[n] for n in row) + " [style=invis]}\n"

    @staticmethod
    def label_attr(label: str, rankdir: str = "TB") -> str:
        """An edge label's attribute (`` label=reshape``): a label the layout makes room for,
        whichever way the flow runs. An ``xlabel`` is placed only after layout, where it
        finds space, and sat on cluster borders and titles (GPT-2's ``ln_f`` into its
        ``getitem``, BERT's attention into its output) and on its own edge and the next box;
        a ``label`` is laid out as a node between the ranks, so nothing else is drawn where
        it is. A role's edge also ends at its port.

        >>> DotWriter.label_attr("reshape"), DotWriter.label_attr("key", "LR")
        (' label=reshape', ' label=key headport=w')
        """
        port = ROLE_PORTS[rankdir].get(label)
        return (f" label={quote(labels.join(label))}" + (f" headport={port}" if port else "")
                if label else "")

    def _legend(self) -> list[str]:
        """The legend node: the colour scale, what the diff's marks mean, which costs the
        labels write."""
        rows = self.scale.legend_rows() if self.scale is not None else []
        rows += self.marks.legend_rows() if self.marks is not None else []
        if self.options.show_costs:
            drawn = [self.view.folded.nodes[n] for n in (*self.view.nodes, *self.view.clusters)]
            rows += costs_row(name for name in cost_names(self.options)
                              if any(value_of(attrs, name) for attrs in drawn))
        return legend_lines(rows)

    def _value_scale(self) -> ColorScale | None:
        name = self.options.color_by
        if name is None:
            return None
        graph, clusters = self.view.folded, self.view.clusters
        painted = [*self.view.nodes, *(clusters if name not in INCLUSIVE else ())]
        scale = ColorScale.of(name, (value_of(graph.nodes[n], name) for n in painted),
                              self.theme.scale)
        if scale is None:
            self._warn_uncolored(name)
        return scale

    def _warn_uncolored(self, name: str) -> None:
        """Warn where the recording has no ``name`` at all (a cost not counted, a mistyped
        statistic): the drawing would come out without colours or legend, and no word why.
        A recording that has it, only not on what this view draws, is drawn as it is."""
        found = colorable(attrs for _, attrs in self.view.source.nodes(data=True))
        if name in found:
            return
        has = ", ".join(repr(n) for n in found) or "none"
        warn(f"color_by={name!r}: the recording has no {name!r} value, so nothing is "
             f"coloured (values it has: {has})")

    def _value(self, node: str) -> float | None:
        return value_of(self.view.folded.nodes[node], self.scale.name) if self.scale else None

    def _colored(self, node: str) -> str:
        """Extra attributes painting ``node`` by its ``color_by`` value, or ``""``."""
        value = self._value(node)
        if value is None:
            return ""
        fill, text = self.scale.color(value)  # type: ignore[union-attr]
        style = "rounded,filled" if self.view.kind(node) in ("box", "param") else "filled"
        return f' fillcolor="{fill}" fontcolor="{text}" style="{style}"'

    def _nest(self, bodies: dict[str | None, list[str]]) -> None:
        """Close each cluster into its parent's body, innermost first, indenting as it goes."""
        depth = {cluster: self._depth(cluster) for cluster in self.cluster_names}
        for cluster in sorted(self.cluster_names, key=lambda c: (-depth[c], self._position(c))):
            header = (f"\tsubgraph {self.cluster_names[cluster]} {{\n"
                      f"\t\tgraph{self.cluster_attrs(cluster)}\n")
            inner = [f"\t{line}" for line in bodies[cluster]]
            bodies[self.view.parent.get(cluster)].extend([header, *inner, "\t}\n"])

    def _depth(self, cluster: str) -> int:
        depth, node = 0, self.view.parent.get(cluster)
        while node is not None:
            depth, node = depth + 1, self.view.parent.get(node)
        return depth

    def _position(self, cluster: str) -> int:
        return self.view.folded.nodes[cluster.removeprefix("group:")]["seq"]

    def title_width(self, cluster: str) -> float:
        """Points a cluster's title needs left of its entry node, the gap included."""
        size = float((self.theme.repeat_cluster if cluster in self.view.groups
                      else self.theme.cluster).get("fontsize", "11"))
        font = self.theme.graph.get("fontname", "Helvetica")
        return max(text_width(line, font, size) for line in self.cluster_lines(cluster)[0]) \
            + _TITLE_GAP

    def cluster_lines(self, cluster: str) -> tuple[list[str], str]:
        """A cluster's title lines and tooltip."""
        title, tooltip = cluster_text(self.view, cluster)
        costs = own_params_lines(self.view, cluster) + \
            cluster_costs(self.view, cluster, self.options)
        if self.marks is None or cluster in self.view.groups:
            return [title, *costs], tooltip or title
        return [*self.marks.cluster_lines(cluster, title), *costs], tooltip or title

    def cluster_attrs(self, cluster: str) -> str:
        lines, tooltip = self.cluster_lines(cluster)
        if cluster in self.view.groups:
            return attr_text({**self.theme.repeat_cluster, "label": lines[0],
                           "id": labels.xml_id("g", cluster), "class": "tgr-repeat"})
        attrs = self.view.folded.nodes[cluster]
        outline = {}
        if self.scale is not None and self.scale.paints_clusters():
            value = self._value(cluster)  # penwidth always: a cluster inherits its parent's
            outline = ({"penwidth": "1"} if value is None else
                       {"color": self.scale.color(value)[0], "penwidth": "3"})
        if self.marks is not None:
            outline = self.marks.cluster_attrs(cluster, self.theme.cluster)
        title = labels.join(*lines) if len(lines) == 1 else labels.join_left(*lines)
        return attr_text({**self.theme.cluster, **outline, "label": title,
                       "tooltip": labels.join(tooltip),
                       "id": labels.xml_id("c", cluster),
                       "class": f"tgr-cluster tgr-{labels.css_class(attrs['type'])}"})

    def _spacers(self) -> dict[str | None, list[str]]:
        """Invisible spacers left of each cluster's entry node (top to bottom only): the
        flow comes in at the middle of that node, so a title written on the left must end
        before it; a spacer widens the cluster to the left, and the boxes keep their size."""
        if self.options.rankdir not in ("TB", "BT"):
            return {}
        needed: dict[str, float] = {}
        for cluster, node in entries(self.view, self.spine).items():
            needed[node] = max(needed.get(node, 0.0), self.title_width(cluster))
        lines: dict[str | None, list[str]] = {}
        for index, (node, width) in enumerate(sorted(needed.items(), key=lambda i: self.names[i[0]])):
            gap = width - self.widths[node] / 2
            if gap <= 0:
                continue
            name = f"s{index}"
            lines.setdefault(self.view.parent.get(node), []).append(
                f'\t{name} [label="" class="tgr-spacer" id="s-{index}" style=invis '
                f'fixedsize=true height=0.01 width={gap / 72:.2f}]\n'
                f"\t{{rank=same; {name} -> {self.names[node]} [style=invis]}}\n")
        return lines

    def _node_line(self, node: str) -> str:
        name = self.names[node] = f"n{len(self.names)}"
        own, themed, extra, tail = self.node_parts(node)
        group = " group=spine" if node in self.on_spine else ""  # sorted before the tooltip
        return f"\t{name} [{own} {themed}{group} {extra}{tail}]\n"

    def style_of(self, node: str) -> str:
        """The theme entry a drawn node is styled by: its kind, or ``model_tensor``."""
        kind = self.view.kind(node)
        role = self.view.folded.nodes[node].get("role")
        return "model_tensor" if kind == "tensor" and role in ("input", "output") else kind

    def node_parts(self, node: str) -> tuple[str, str, str, str]:
        """A node statement's parts around its ``group`` (where the graphviz package's
        sorted attributes put it): label, class and id; its kind's style (a diff's marks
        included); tooltip and width; colour. The report's page composes statements from
        them (see :mod:`torchgraphrec.report.describe`)."""
        style = self.style_of(node)
        lines, tooltip = node_text(self.view, node, self.options)
        if self.marks is not None:
            lines, tooltip = self.marks.node_text(node, lines, tooltip)
        extra = {"tooltip": labels.join(*tooltip.split("\n"))}
        font, size = self.fonts[style]
        self.widths[node] = max(text_width(line, font, size) for line in lines) + 144 * self.margin
        if any(needs_width(line) for line in lines):
            extra["width"] = f"{self.widths[node] / 72:.2f}"
        themed = self.styles[style] if self.marks is None else attr_text(
            {**self.kinds[style], **self.marks.node_attrs(node, self.kinds[style])})[2:-1]
        if self.view.folded.nodes[node].get("phase") == "backward":
            # a backward collective: no flow of the forward's reaches it, its outline says so
            themed += " " + attr_text(styled(self.kinds[style], {"style": "dashed"}))[2:-1]
        # ids from labels.xml_id hold no quote or backslash, so they are quoted as they are
        own = (f"label={quote(labels.join(*lines))} class=\"tgr-{self.view.kind(node)}\" "
               f"id=\"{labels.xml_id('n', node)}\"")
        if self.view.folded.nodes[node].get("name") in ROLES:
            own += " ordering=in"  # its arguments side by side in order: query, key, value
        return own, themed, attr_text(extra)[2:-1], self._colored(node)

    def _end(self, node: str, last: bool) -> tuple[str, str]:
        """The DOT node an edge ends at, and for a cluster the attribute naming it."""
        if node not in self.cluster_names:
            return self.names[node], ""
        members = sorted(self.inside[node], key=lambda n: self.view.folded.nodes[n]["seq"])
        anchor = members[-1] if last else members[0]
        return self.names[anchor], f' {"ltail" if last else "lhead"}={self.cluster_names[node]}'

    def _within(self, node: str, cluster: str) -> bool:
        """Whether ``node`` (a node or a cluster) is drawn inside ``cluster``."""
        up = self.view.parent.get(node)
        while up is not None and up != cluster:
            up = self.view.parent.get(up)
        return up == cluster

    def flow_rank_attr(self, source: str, target: str) -> str:
        """A flow edge's attributes where it feeds an op drawn under its parameters: the
        parameters take the rank before the op, so an edge from outside the op's cluster
        spans two ranks (`` minlen=2``) and comes in over the parameters, not beside the
        cluster; and it weighs more than the parameters' edges together, which would
        otherwise pull the op out from under the flow.

        Returns ``""`` for any other edge.
        """
        params = self.under.get(target)
        if params is None or self.view.kind(source) == "param":
            return ""
        cluster = self.view.parent.get(target)
        outside = cluster is not None and not self._within(source, cluster)
        return (" minlen=2" if outside else "") + f" weight={params + 1}"

    def _edge_line(self, source: str, target: str) -> str:
        kind = "param" if self.view.kind(source) == "param" else "flow"
        edge_id = f"{labels.xml_id('e', source)}-{labels.xml_id('', target)}"
        extra = " style=dashed arrowhead=none" if kind == "param" else ""
        if self.marks is not None:  # a param edge's dashes stay, a removed one's are added
            base = {"style": "dashed"} if kind == "param" else {}
            extra += " " + attr_text(self.marks.edge_attrs(source, target, base))[2:-1]
        extra += self.label_attr(self.view.labels.get((source, target), ""), self.options.rankdir)
        extra += self.flow_rank_attr(source, target)
        tail, tail_attr = self._end(source, last=True)
        head, head_attr = self._end(target, last=False)
        return (f"\t{tail} -> {head} [class=\"tgr-{kind}\" id=\"{edge_id}\"{extra}"
                f"{tail_attr}{head_attr}]\n")
