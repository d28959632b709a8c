"""The status of each drawn edge of a diff: those of the recorded edges it stands for (compare/ marked them)."""

from __future__ import annotations

from typing import Callable, Iterable


from torchgraphrec.render.view import View

__all__ = ["edge_statuses"]

def edge_statuses(view: View) -> dict[tuple[str, str], set[str]]:
    """The statuses of the recorded edges each drawn edge stands for, by its two ends."""
    graph, drawn_as = view.folded, view.drawn_as
    drawn = {*view.nodes, *view.clusters}
    found: dict[tuple[str, str], set[str]] = {}
    for source, target, status in graph.edges(data="diff", default="same"):
        if status == "same":  # most edges: only where drawn as they are
            ends = [{drawn_as.get(source)}, {drawn_as.get(target)}]
        else:
            ends = [_drawn(view, drawn, source, graph.predecessors),
                    _drawn(view, drawn, target, graph.successors)]
        for tail in ends[0]:
            for head in ends[1]:
                if tail != head and tail is not None and head is not None:
                    found.setdefault((tail, head), set()).add(status)
    return found


def _drawn(view: View, drawn: set[str], node: str,
           neighbours: Callable[[str], Iterable[str]]) -> set[str]:
    """What draws ``node``; where it is bridged over, what draws the nearest nodes on that
    side of what stands for it (as the drawn edge was bridged)."""
    found: set[str] = set()
    stack = [view.drawn_as[node]] if node in view.drawn_as else []
    seen = set(stack)
    while stack:
        current = stack.pop()
        if current in drawn:
            found.add(current)
            continue
        fresh = [view.drawn_as.get(n, n) for n in neighbours(current)]
        fresh = [n for n in fresh if n not in seen]
        seen.update(fresh)
        stack += fresh
    return found
