"""Ranks compared: which ranks ran a different graph, and where each first parts, aligned on collectives.

Op ids shift after the first difference and clocks differ between processes, so ranks are
compared on what ran in order (module calls, ops and tensors, with shapes and dtypes), cut
into stretches at the collectives (``coll_seq``): the first stretch where a rank differs is
where it parted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import networkx as nx

__all__ = ["RankComparison", "compare_ranks", "graph_of", "steps_of"]

#: ``("layer", qualname, call_index)``, ``("tensor", shape, dtype, parent, None)`` or
#: ``("op", name, shape, dtype, parent, collective)``: a collective ends a stretch (last)
Step = tuple


def steps_of(graph: nx.DiGraph) -> list[tuple[str, Step]]:
    """``(node id, step)`` for each module call, op and tensor, in the order they ran.

    Tensors are compared where ops are not recorded (``ops=None``) or record no shape
    (``ops="autograd"``): a smaller batch or another dtype is another graph.

    >>> g = nx.DiGraph()
    >>> g.add_node("layer:#0", kind="layer", seq=1, qualname="", call_index=0)
    >>> g.add_node("op:add#0", kind="op", seq=2, name="add", shape=(2,), dtype="float32",
    ...            parent="layer:#0")
    >>> g.add_node("tensor:0", kind="tensor", seq=3, shape=(2,), dtype="float32",
    ...            parent="layer:#0")
    >>> for _, step in steps_of(g):
    ...     print(step)
    ('layer', '', 0)
    ('op', 'add', (2,), 'float32', 'layer:#0', None)
    ('tensor', (2,), 'float32', 'layer:#0', None)
    """
    found = []
    for node, attrs in sorted(graph.nodes(data=True), key=lambda item: item[1].get("seq", 0)):
        kind = attrs.get("kind")
        if kind == "layer":
            found.append((node, ("layer", attrs.get("qualname"), attrs.get("call_index"))))
        elif kind == "op":
            found.append((node, ("op", attrs.get("name"), tuple(attrs.get("shape") or ()),
                                 attrs.get("dtype"), attrs.get("parent"),
                                 attrs.get("collective"))))
        elif kind == "tensor":
            found.append((node, ("tensor", tuple(attrs.get("shape") or ()), attrs.get("dtype"),
                                 attrs.get("parent"), None)))
    return found


def _stretches(steps: list[tuple[str, Step]]) -> list[list[tuple[str, Step]]]:
    """The steps cut after each collective."""
    found: list[list[tuple[str, Step]]] = [[]]
    for node, step in steps:
        found[-1].append((node, step))
        if step[0] == "op" and step[-1] is not None:
            found.append([])
    return found


def _describe(graph: nx.DiGraph, node: str | None) -> str:
    if node is None:
        return "nothing (its recording ends here)"
    attrs = graph.nodes[node]
    if attrs["kind"] == "layer":
        return f"module call {node}"
    shape = "×".join(str(d) for d in attrs.get("shape") or ()) or "scalar"
    dtype = f", {attrs['dtype']}" if attrs.get("dtype") else ""
    where = attrs.get("parent") or "no module"
    if attrs["kind"] == "tensor":
        return f"tensor {node} ({shape}{dtype}) in {where}"
    text = f"op {attrs.get('name')} ({shape}{dtype}) in {where}"
    if attrs.get("collective"):
        text += f", a {attrs['collective']} on group {attrs.get('group_name')!r}"
    return text


def _parting(first: nx.DiGraph, other: nx.DiGraph, rank: int, first_rank: int) -> str:
    """Where ``other`` first parts from ``first``, in words."""
    mine, theirs = _stretches(steps_of(first)), _stretches(steps_of(other))
    for index in range(max(len(mine), len(theirs))):
        a = mine[index] if index < len(mine) else []
        b = theirs[index] if index < len(theirs) else []
        if [s for _, s in a] == [s for _, s in b]:
            continue
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x[1] != y[1]), min(len(a), len(b)))
        after = f"after collective #{index - 1}" if index else "before any collective"
        return (f"rank {rank} parts from rank {first_rank} {after}: it ran "
                f"{_describe(other, b[at][0] if at < len(b) else None)} where rank "
                f"{first_rank} ran {_describe(first, a[at][0] if at < len(a) else None)}")
    return f"rank {rank} differs from rank {first_rank} in attributes only"


@dataclass
class RankComparison:
    """What :func:`compare_ranks` found: ``same`` (bool), ``divergent`` (the sorted ranks
    whose graph differs from the first one's) and ``partings`` (rank -> where it parts)."""

    ranks: list[int]
    divergent: list[int] = field(default_factory=list)
    partings: dict[int, str] = field(default_factory=dict)

    @property
    def same(self) -> bool:
        return not self.divergent

    def __bool__(self) -> bool:
        """True where ranks differ (as :class:`~torchgraphrec.GraphDiff`)."""
        return not self.same

    def summary(self) -> str:
        """One line for all ranks, then one per divergent rank saying where it parts."""
        if self.same:
            if len(self.ranks) == 1:
                return f"1 rank, rank {self.ranks[0]}: nothing to compare it with"
            return f"{len(self.ranks)} ranks ran the same graph (ranks {self.ranks})"
        lines = [f"{len(self.divergent)} of {len(self.ranks)} ranks differ from rank "
                 f"{self.ranks[0]}: {self.divergent}"]
        lines += [self.partings[rank] for rank in self.divergent]
        return "\n".join(lines)


def graph_of(rec_or_graph: Any) -> nx.DiGraph:
    """The graph of a :class:`~torchgraphrec.Recorder`, a :class:`~torchgraphrec.Recording`
    or a graph itself.

    >>> graph_of(nx.DiGraph(model="M")).graph["model"]
    'M'
    >>> graph_of(3)
    Traceback (most recent call last):
    TypeError: expected a Recorder, a Recording or a networkx.DiGraph, got int: 3
    """
    if isinstance(rec_or_graph, nx.DiGraph):
        return rec_or_graph
    graph = getattr(rec_or_graph, "graph", None)
    if isinstance(graph, nx.DiGraph):
        return graph
    raise TypeError(f"expected a Recorder, a Recording or a networkx.DiGraph, got "
                    f"{type(rec_or_graph).__name__}: {rec_or_graph!r}"[:300])


def _rank_of(graph: nx.DiGraph, position: int) -> int:
    rank = graph.graph.get("rank")
    return rank if isinstance(rank, int) else position


def compare_ranks(graphs: Sequence[Any]) -> RankComparison:
    """Compare each rank's graph (as :func:`~torchgraphrec.gather` returns them) with the
    first rank's.

    >>> import networkx as nx
    >>> one = nx.DiGraph(rank=0)
    >>> one.add_node("op:add#0", kind="op", seq=1, name="add", shape=(2,), parent=None)
    >>> two = nx.DiGraph(rank=1)
    >>> two.add_node("op:mul#0", kind="op", seq=1, name="mul", shape=(2,), parent=None)
    >>> found = compare_ranks([one, two])
    >>> found.same, found.divergent
    (False, [1])
    >>> print(found.summary())
    1 of 2 ranks differ from rank 0: [1]
    rank 1 parts from rank 0 before any collective: it ran op mul (2) in no module where rank 0 ran op add (2) in no module
    """
    found = [graph_of(item) for item in graphs]
    if not found:
        raise ValueError("compare_ranks needs at least one graph, got none")
    ranks = [_rank_of(graph, position) for position, graph in enumerate(found)]
    result = RankComparison(ranks)
    reference = [step for _, step in steps_of(found[0])]
    for rank, graph in zip(ranks[1:], found[1:]):
        if [step for _, step in steps_of(graph)] != reference:
            result.divergent.append(rank)
            result.partings[rank] = _parting(found[0], graph, rank, ranks[0])
    result.divergent.sort()
    return result
