"""diff(): compare two recordings of a model, node by node, into a GraphDiff."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

import networkx as nx

from torchgraphrec.compare.changes import changes
from torchgraphrec.compare.match import match

__all__ = ["GraphDiff", "diff"]

Edge = tuple[str, str]


def _edge_changes(a: nx.DiGraph, b: nx.DiGraph, matches: Mapping[str, str]) -> tuple[set, set]:
    """Edges between matched nodes that only one side has: (added in b, removed from a)."""
    back = {node_b: node_a for node_a, node_b in matches.items()}
    added = {(s, t) for s, t in b.edges if s in back and t in back
             and not a.has_edge(back[s], back[t])}
    removed = {(s, t) for s, t in a.edges if s in matches and t in matches
               and not b.has_edge(matches[s], matches[t])}
    return added, removed


class GraphDiff:
    """How recording ``b`` differs from recording ``a``; made by :func:`diff`.

    Attributes:
        a: the first graph (the old side).
        b: the second graph (the new side).
        matches: ``{id in a: id in b}`` for every node both sides have.
        added: ids in ``b`` of the nodes ``a`` lacks.
        removed: ids in ``a`` of the nodes ``b`` lacks.
        changed: ``{id in b: {attribute: (old, new)}}`` for matched nodes that differ in
            what describes the model (see :data:`~torchgraphrec.compare.changes.DESCRIBING`).
        edges_added: data-flow edges, as ``(source, target)`` ids in ``b``, between matched
            nodes that ``a`` does not connect.
        edges_removed: likewise, ids in ``a``, for edges that ``b`` lacks.
    """

    def __init__(self, a: nx.DiGraph, b: nx.DiGraph) -> None:
        self.a, self.b = a, b
        self.matches: Mapping[str, str] = match(a, b)
        matched_b = set(self.matches.values())
        self.added: frozenset[str] = frozenset(n for n in b.nodes if n not in matched_b)
        self.removed: frozenset[str] = frozenset(n for n in a.nodes if n not in self.matches)
        found = {node_b: changes(a, node_a, b, node_b) for node_a, node_b in self.matches.items()}
        self.changed: Mapping[str, Mapping[str, tuple]] = {n: c for n, c in found.items() if c}
        added, removed = _edge_changes(a, b, self.matches)
        self.edges_added: frozenset[Edge] = frozenset(added)
        self.edges_removed: frozenset[Edge] = frozenset(removed)
        self._union: Optional[nx.DiGraph] = None

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.edges_added
                    or self.edges_removed)

    def __repr__(self) -> str:
        return (f"<GraphDiff added={len(self.added)} removed={len(self.removed)} "
                f"changed={len(self.changed)} edges_added={len(self.edges_added)} "
                f"edges_removed={len(self.edges_removed)}>")

    @property
    def union(self) -> nx.DiGraph:
        """Both graphs in one, every node and edge marked ``same``, ``added``, ``removed`` or
        ``changed`` (see :func:`~torchgraphrec.compare.union.union_graph`); made once."""
        if self._union is None:
            from torchgraphrec.compare.union import union_graph

            self._union = union_graph(self)
        return self._union

    def subtree_changed(self, layer: str) -> bool:
        """Whether the layer call ``layer`` (an id in :attr:`union`) or anything under it
        differs: drawn at any depth, it shows where to look.

        Raises:
            ValueError: ``layer`` is not a layer node of the union.
        """
        attrs = self.union.nodes.get(layer)
        if attrs is None or attrs["kind"] != "layer":
            raise ValueError(f"not a layer call of the diff's union graph: {layer!r}")
        return attrs["diff_inside"]

    def render(self, path: Any, **options: Any) -> Path:
        """Draw the :attr:`union` of both recordings to ``path``, in the format its suffix
        names (``.svg``, ``.png``, ``.pdf``, ``.dot``/``.gv``; ``.html`` the interactive
        report, every depth drawn so; ``.json`` writes the union itself), with the options
        of :meth:`Recording.render <torchgraphrec.Recording.render>` (``depth``,
        ``theme``, ``show_costs``...; not ``color_by``).

        Added nodes are green and marked ``+``, removed ones red, dashed and marked ``−``,
        nodes changed in themselves amber with ``old → new`` on their label, and nodes
        only affected (by something under them, or by shapes that follow a change
        elsewhere) outlined in amber; the rest is greyed out; edges added or removed are
        green or red and dashed. A call whose subtree differs is marked at every depth, so
        ``depth=1`` still shows where to look. A legend names each status drawn. The paper
        theme says the same in greyscale, with thick, dashed, double and dotted lines.

        Returns:
            The path written.

        Raises:
            ValueError: an unknown suffix, or ``color_by`` (the colours say what changed).

        >>> import networkx as nx
        >>> from torchgraphrec.schema import SCHEMA_VERSION
        >>> def recorded(width):
        ...     g = nx.DiGraph(schema_version=SCHEMA_VERSION, model="M", torch_version="2.13",
        ...                    ops="torch")
        ...     g.add_node("param:w", kind="param", label="w", parent=None, depth=0, seq=0,
        ...                qualname="w", shape=(width, 4), dtype="float32",
        ...                requires_grad=True, buffer=False)
        ...     return g
        >>> from torchgraphrec.render.dot import to_dot
        >>> found = diff(recorded(8), recorded(16))
        >>> dot = to_dot(found.union, include_params=True)  # found.render("d.dot", ...) writes it
        >>> "16×4" in dot and "8×4 → 16×4" in dot
        True
        """
        from torchgraphrec.compare.draw import render_diff

        return render_diff(self, path, **options)

    def summary(self, *, max_lines: int = 12) -> str:
        """A few lines a person reads in ten seconds: what was added, removed and changed,
        grouped by module, biggest changes first; see
        :func:`~torchgraphrec.compare.summary.summarize`."""
        from torchgraphrec.compare.summary import summarize

        return summarize(self, max_lines=max_lines)


def _as_graph(value: Any, side: str) -> nx.DiGraph:
    if isinstance(value, nx.DiGraph):
        return value
    if isinstance(getattr(value, "graph", None), nx.DiGraph):
        return value.graph
    if isinstance(value, (str, os.PathLike)):
        from torchgraphrec.graph import from_json

        return from_json(Path(value).read_text(encoding="utf-8"))
    raise TypeError(f"{side} must be a Recording, a networkx.DiGraph or the path of a saved "
                    f"recording, got {type(value).__name__}: {value!r}"[:300])


def diff(a: Any, b: Any) -> GraphDiff:
    """Compare two recordings: what ``b`` adds, removes and changes relative to ``a``.

    Nodes are matched by what they are, not by their ids: layer calls by ``(qualname,
    call_index)``, params by ``qualname``, ops by their call, name and occurrence within
    the call, tensors by the op or call that produced them (a model input by its name).

    Args:
        a: the old side: a :class:`~torchgraphrec.Recording`, its graph, or the path of a
            recording saved as JSON.
        b: the new side, likewise.

    Returns:
        A :class:`GraphDiff`, false when the two models are the same.

    Raises:
        TypeError: ``a`` or ``b`` is none of those.
        ValueError: the two were recorded with different ``ops`` modes, so their ops
            cannot be matched.
        SchemaError: a path holds no valid recording.

    >>> import networkx as nx
    >>> from torchgraphrec.schema import SCHEMA_VERSION
    >>> def recorded(width):
    ...     g = nx.DiGraph(schema_version=SCHEMA_VERSION, model="M", torch_version="2.13",
    ...                    ops="torch")
    ...     g.add_node("param:w", kind="param", label="w", parent=None, depth=0, seq=0,
    ...                qualname="w", shape=(width, 4), dtype="float32",
    ...                requires_grad=True, buffer=False)
    ...     return g
    >>> d = diff(recorded(8), recorded(16))
    >>> bool(d), d.changed
    (True, {'param:w': {'shape': ((8, 4), (16, 4))}})
    >>> bool(diff(recorded(8), recorded(8)))
    False
    """
    graph_a, graph_b = _as_graph(a, "a"), _as_graph(b, "b")
    ops = graph_a.graph.get("ops"), graph_b.graph.get("ops")
    if ops[0] != ops[1]:
        raise ValueError(f"cannot match ops recorded as {ops[0]!r} with ops recorded as "
                         f"{ops[1]!r}: record both models with the same ops mode")
    return GraphDiff(graph_a, graph_b)
