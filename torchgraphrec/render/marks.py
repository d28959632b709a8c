"""A diff's drawing: every node, cluster and edge of the union styled and labelled by the status compare/ gave it."""

from __future__ import annotations

from collections import Counter
from typing import Optional

import networkx as nx

from torchgraphrec.render import diffstatus, difftext, labels
from torchgraphrec.render.legend import text_row
from torchgraphrec.render.theme import Attrs, Theme
from torchgraphrec.render.view import View

__all__ = ["is_diff", "styled", "DiffMarks"]

#: The statuses in the order the legend lists them, with what it calls them.
_LEGEND = (("added", "+ added"), ("removed", "− removed"), ("changed", "changed: old → new"),
           ("inside", "affected: inside, shapes"), ("same", "unchanged"))


def is_diff(graph: nx.DiGraph) -> bool:
    """Whether ``graph`` is the union of a diff (:attr:`~torchgraphrec.GraphDiff.union`)."""
    return "diff_a_model" in graph.graph


def styled(base: Attrs, status: Attrs) -> dict[str, str]:
    """``status``'s attributes over ``base``, the style words of both kept.

    >>> styled({"style": "rounded,filled", "color": "#000000"}, {"style": "dashed"})
    {'style': 'rounded,filled,dashed'}
    """
    found = dict(status)
    if "style" in status:
        words = [*base.get("style", "").split(","), *status["style"].split(",")]
        found["style"] = ",".join(dict.fromkeys(word for word in words if word))
    return found


class DiffMarks:
    """What the drawing of a diff's union adds to each element, from the theme's palette.

    A node is ``added``, ``removed``, ``changed`` (in itself: its type or settings, an
    op's name or arguments, a parameter's shape; a box also by what changed inside it) or
    ``inside`` (affected: the same in itself, but something under it differs or shapes
    from elsewhere reach it changed), else ``same``, drawn greyed out: the statuses
    :func:`~torchgraphrec.compare.status.mark_statuses` wrote on the union, read here.
    """

    def __init__(self, view: View, theme: Theme) -> None:
        self.view, self.theme = view, theme
        self.mode = view.source.graph.get("diff_mode")
        self.boxes = {n for n in view.nodes if view.kind(n) == "box"}
        self.seen: set[str] = set()
        self.lifted: Optional[dict[tuple[str, str], set[str]]] = None

    def status(self, node: str) -> str:
        """The status a drawn node or cluster is drawn with (a folded group: ``same``)."""
        attrs = self.view.folded.nodes[node] if node in self.view.folded else {}
        return attrs.get("diff_box_status" if node in self.boxes else "diff_status", "same")

    def _params(self, node: str) -> list:
        return self.view.folded.nodes[node].get("diff_params") or []

    def node_attrs(self, node: str, base: Attrs) -> dict[str, str]:
        """The status attributes of a drawn node whose own style is ``base``."""
        status = self.status(node)
        self.seen.add(status)
        return styled(base, self.theme.diff_node[status])

    def _changes(self, node: str, label: bool) -> list[str]:
        """Its ``old → new`` lines: all of them for the tooltip; on the ``label``, of a
        node changed in itself only those (what followed is in the tooltip), and never a
        mode change the whole drawing shares."""
        attrs = self.view.folded.nodes[node]
        changes = dict(attrs.get("diff_changes") or {})
        params = self._params(node) if attrs["kind"] == "layer" else ()
        own = attrs.get("diff_own") or ()
        if label and self.mode is not None:
            changes.pop("training", None)
        if label and (params or own):
            kept = ("training", "num_params") if params else ("training",)
            changes = {**{k: v for k, v in changes.items() if k in own},
                       **{k: v for k, v in changes.items() if k in kept}}
            if "type" in changes:  # settings of another type are not comparable
                changes.pop("settings", None)
        return difftext.change_lines(attrs["kind"], changes, params)

    def _title(self, node: str, title: str) -> str:
        changes = self.view.folded.nodes[node].get("diff_changes") or {}
        if "type" in changes:
            title = difftext.retyped(title, *changes["type"])
        return difftext.marked(title, self.status(node))

    def _inside_line(self, node: str) -> str:
        if node not in self.boxes or self.status(node) not in ("changed", "inside"):
            return ""
        counts = Counter({tuple(key.split(" ")): n for key, n in
                          (self.view.folded.nodes[node].get("diff_counts") or {}).items()})
        counts["changed", "param"] -= len(self._params(node))  # its own: written above
        line = difftext.inside_line(+counts)
        if not line and self.view.folded.nodes[node].get("diff") == "same":
            return "inside: data flow differs"  # no call, op or param under it does
        return line

    def node_text(self, node: str, lines: list[str], tooltip: str) -> tuple[list[str], str]:
        """A node's label lines and tooltip with its mark, ``old → new`` lines and, on a
        box, what differs inside it."""
        inside = [line for line in (self._inside_line(node),) if line]
        changes = self._changes(node, label=True)
        attrs = self.view.folded.nodes[node]
        count = labels.count_text(attrs.get("num_params", 0))
        if count and any(line.endswith(f"→ {count}") for line in changes):  # says the count
            lines = [line for line in lines if line != count]
        shown = [self._title(node, lines[0]), *lines[1:], *difftext.clipped(changes), *inside]
        return shown, "\n".join([tooltip, *self._changes(node, label=False), *inside])

    def cluster_attrs(self, cluster: str, base: Attrs) -> dict[str, str]:
        """The status attributes of a cluster whose own attributes are ``base``."""
        status = self.status(cluster)
        self.seen.add(status)
        return styled(base, self.theme.diff_cluster[status])

    def cluster_lines(self, cluster: str, title: str) -> list[str]:
        """A cluster's title with its mark, and its most telling change."""
        return [self._title(cluster, title), *self._changes(cluster, label=True)[:1]]

    def edge_attrs(self, source: str, target: str, base: Attrs) -> dict[str, str]:
        """The status attributes of a drawn edge: added or removed where one of its ends
        is, else those of the recorded edges it stands for (a data flow rewired between
        nodes both sides have is added or removed; one that both sides have is the same)."""
        ends = {self.status(source), self.status(target)}
        status = next((s for s in ("removed", "added") if s in ends), None)
        if status is None:
            if self.lifted is None:
                self.lifted = diffstatus.edge_statuses(self.view)
            recorded = self.lifted.get((source, target), {"same"})
            status = "same" if "same" in recorded or len(recorded) > 1 else next(iter(recorded))
        self.seen.add(status)
        return styled(base, self.theme.diff_edge[status])

    def legend_rows(self) -> list[str]:
        """The legend's rows: a swatch of each status drawn (on a node, a cluster or an
        edge), styled as its nodes are, and a mode change every call shares
        (``every call: train → eval``)."""
        rows = [_swatch(self.theme.diff_node[status], text) for status, text in _LEGEND
                if status in self.seen]
        if self.mode is not None:
            mode = difftext.change_lines("layer", {"training": self.mode})[0]
            rows.append(text_row(f"every call: {mode}"))
        return rows


def _swatch(attrs: Attrs, text: str) -> str:
    """A legend row: ``text`` in a rounded box with the border, fill and text colour of
    ``attrs`` (dashed, dotted or doubled as they are)."""
    words = attrs.get("style", "").split(",")
    style = ",".join(["rounded", *(word for word in ("dashed", "dotted") if word in words)])
    border = max(1, round(float(attrs.get("penwidth", "1"))))
    fill = f' BGCOLOR="{attrs["fillcolor"]}"' if "fillcolor" in attrs else ""
    font = attrs.get("fontcolor", "#000000")
    box = (f'<TABLE STYLE="{style}" BORDER="{border}" COLOR="{attrs["color"]}"{fill} '
           f'CELLBORDER="0" CELLPADDING="3"><TR><TD><FONT COLOR="{font}">'
           f'{labels.html_text(text)}</FONT></TD></TR></TABLE>')
    if attrs.get("peripheries") == "2":
        box = (f'<TABLE STYLE="rounded" BORDER="1" COLOR="{attrs["color"]}" CELLBORDER="0" '
               f'CELLPADDING="1"><TR><TD>{box}</TD></TR></TABLE>')
    return f'<TR><TD ALIGN="LEFT">{box}</TD></TR>'
