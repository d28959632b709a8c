"""Finding chains of identical sibling calls (the 12 blocks of GPT-2) to draw once, ``× N``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import networkx as nx

__all__ = ["Run", "find_runs", "call_tree", "deepest_first", "signatures", "chained",
           "split_chains"]

MAX_PERIOD = 8


@dataclass(frozen=True)
class Run:
    """``count`` consecutive repeats of a block of ``period`` sibling calls."""

    start: int
    period: int
    count: int

    def repeat(self, siblings: Sequence[Any], k: int) -> Sequence[Any]:
        """The calls of the ``k``-th repeat (0-based)."""
        first = self.start + k * self.period
        return siblings[first:first + self.period]


def find_runs(keys: Sequence[Hashable], max_period: int = MAX_PERIOD) -> list[Run]:
    """Maximal runs of a repeated block in ``keys``, left to right, without overlap.

    At each position the block length covering most items wins (the shorter on a tie), so
    ``L R L R L R`` is one run of ``(L R) × 3``.

    >>> find_runs("abababx")
    [Run(start=0, period=2, count=3)]
    >>> find_runs("xaaaybcbc")
    [Run(start=1, period=1, count=3), Run(start=5, period=2, count=2)]
    """
    runs: list[Run] = []
    position, size = 0, len(keys)
    while position < size:
        best = Run(position, 1, 1)
        for period in range(1, min(max_period, (size - position) // 2) + 1):
            block = keys[position:position + period]
            count = 1
            while keys[position + count * period:position + (count + 1) * period] == block:
                count += 1
            if count > 1 and count * period > best.count * best.period:
                best = Run(position, period, count)
        if best.count > 1:
            runs.append(best)
        position += best.period * best.count
    return runs


def call_tree(graph: nx.DiGraph) -> tuple[list[Any], dict[Any, list[Any]], dict[Any, str]]:
    """``graph``'s nodes in the order they were observed (``seq``), each node's children
    in that order (under its ``parent``; ``None`` holds the top), and each node's kind.

    >>> g = nx.DiGraph()
    >>> g.add_node("b", seq=2, parent="a", kind="op")
    >>> g.add_node("a", seq=1, parent=None, kind="layer")
    >>> call_tree(g)
    (['a', 'b'], {None: ['a'], 'a': ['b']}, {'a': 'layer', 'b': 'op'})
    """
    order = sorted(graph.nodes, key=lambda n: graph.nodes[n]["seq"])
    children: dict[Any, list[Any]] = {}
    for node in order:
        children.setdefault(graph.nodes[node]["parent"], []).append(node)
    return order, children, {node: graph.nodes[node]["kind"] for node in order}


def deepest_first(graph: nx.DiGraph, order: Sequence[Any], kind: Mapping[Any, str]) -> list[Any]:
    """The layer calls of ``order``, deepest first, each before its parent (as
    :func:`signatures` takes them)."""
    return sorted((n for n in reversed(order) if kind[n] == "layer"),
                  key=lambda n: -graph.nodes[n]["depth"])


def signatures(children: Mapping[Any, Sequence[Any]], kind_of: Mapping[Any, str],
               label_of: Mapping[Any, Hashable], order: Sequence[Any]) -> dict[Any, int]:
    """A small integer per layer, equal for layers of the same type and inner structure.

    ``order`` lists the layers deepest first, so children are signed before their parents;
    a signature covers the type (``label_of``), the child layers' signatures and the kinds
    and labels of the other children, in order. Parameters do not count: they hang under
    their module's first call only.
    """
    interned: dict[tuple, int] = {}
    signed: dict[Any, int] = {}
    for layer in order:
        inner = tuple(signed[child] if kind_of[child] == "layer"
                      else (kind_of[child], label_of[child]) for child in children.get(layer, ())
                      if kind_of[child] != "param")
        key = (label_of[layer], inner)
        signed[layer] = interned.setdefault(key, len(interned))
    return signed


def chained(graph: nx.DiGraph, earlier: Sequence[str], later: Sequence[str]) -> bool:
    """Whether something the calls ``earlier`` returned flows into what the calls ``later``
    received: the same tensor, or a path of recorded edges between them.

    The walk follows only edges seen before ``later`` ended, so that it stays between the
    two calls instead of running through the rest of the model.

    >>> g = nx.DiGraph()
    >>> g.add_node("a", outputs=("t1",), inputs=("t0",), t_end_ns=5)
    >>> g.add_node("b", outputs=("t2",), inputs=("t1",), t_end_ns=9)
    >>> g.add_node("c", outputs=("t3",), inputs=("t0",), t_end_ns=12)
    >>> g.add_nodes_from(["t0", "t1", "t2", "t3"])
    >>> chained(g, ["a"], ["b"]), chained(g, ["b"], ["c"])
    (True, False)
    """
    sources = {t for call in earlier for t in graph.nodes[call]["outputs"] if t in graph}
    targets = {t for call in later for t in graph.nodes[call]["inputs"] if t in graph}
    if sources & targets:
        return True
    limit = max(graph.nodes[call]["t_end_ns"] for call in later)
    seen, stack = set(sources), list(sources)
    while stack:
        for _, successor, when in graph.out_edges(stack.pop(), data="t_ns"):
            if successor in seen or when > limit:
                continue
            if successor in targets:
                return True
            seen.add(successor)
            stack.append(successor)
    return False


def split_chains(run: Run, links: Sequence[bool]) -> list[Run]:
    """The parts of ``run`` whose consecutive repeats are linked (``links[k]``: repeat
    ``k`` feeds repeat ``k + 1``), each of two repeats or more.

    >>> split_chains(Run(0, 1, 5), [True, False, True, True])
    [Run(start=0, period=1, count=2), Run(start=2, period=1, count=3)]
    """
    parts, first = [], 0
    for k in range(run.count):
        if k == run.count - 1 or not links[k]:
            if k - first >= 1:
                parts.append(Run(run.start + first * run.period, run.period, k - first + 1))
            first = k + 1
    return parts
