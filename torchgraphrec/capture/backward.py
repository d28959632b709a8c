"""Timing the backward pass per op, through hooks on the autograd nodes each op made."""

from __future__ import annotations

import bisect
import time
from typing import Any, Callable, Optional, Sequence

import networkx as nx

from torchgraphrec.capture.clock import Clock

__all__ = ["BackwardClock", "owners"]


def owners(numbers: Sequence[int], found: Sequence[tuple[int, Any, tuple]], first: int,
           made_first: Callable[[Any], bool] = lambda node: False) -> list[tuple[Any, int]]:
    """``(autograd node, op index)`` for each node ``found`` by a walk: an op owns the
    sequence numbers from the number autograd would have given next when it started up to
    the next op's (``numbers``, rising; the ops' indices start at ``first``). A node for
    which ``made_first`` holds (a custom ``autograd.Function``'s, made before its forward
    runs the ops inside it) belongs to the first op started after it, where there is one.

    >>> owners([10, 12, 15], [(10, "a", ()), (11, "b", ()), (16, "c", ())], 5)
    [('a', 5), ('b', 5), ('c', 7)]
    >>> owners([10, 12, 15], [(9, "f", ()), (11, "g", ())], 5, lambda node: True)
    [('f', 5), ('g', 6)]
    """
    pairs = []
    for number, node, _ in found:
        position = bisect.bisect_right(numbers, number) - 1
        if made_first(node) and position + 1 < len(numbers):
            position += 1
        if position >= 0:
            pairs.append((node, first + position))
    return pairs


class BackwardClock:
    """Notes when autograd starts and finishes the backward of each recorded op.

    The hooks return ``None``, so gradients are untouched; every handle is removed by
    :meth:`detach`. Times are kept by node id, the earliest start and latest end over the
    autograd nodes an op owns, read from the recording's ``clock``, which the hooks' own
    work does not advance.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.starts: dict[str, int] = {}
        self.ends: dict[str, int] = {}
        self.count = 0  # hook runs so far: changes with every backward, repeated ones too
        self.running: Optional[str] = None  # the op whose autograd node runs now
        self._handles: list[Any] = []

    def attach(self, pairs: Sequence[tuple[Any, str]]) -> None:
        """Hook each autograd node in ``pairs``, timed under the op node id it is paired with."""
        starts, ends, clock, now = self.starts, self.ends, self.clock, time.perf_counter_ns
        for node, node_id in pairs:

            # autograd calling a hook costs about what it costs to call a pack hook: half
            # before it, half after
            def before(grad_outputs: Any, node_id: str = node_id) -> None:
                entered = now()
                starts.setdefault(node_id, self._time(entered))
                self.running = node_id
                self.count += 1
                clock.spent += now() - entered + clock.costs.pack

            def after(grad_inputs: Any, grad_outputs: Any, node_id: str = node_id) -> None:
                entered = now()
                ends[node_id] = max(ends.get(node_id, 0), self._time(entered))
                self.running = None
                self.count += 1
                clock.spent += now() - entered + clock.costs.pack

            self._handles.append(node.register_prehook(before))
            self._handles.append(node.register_hook(after))

    def _time(self, entered: int) -> int:
        """The recording's time when a hook was entered (``entered``, on the wall clock):
        less what the recorder took, and always after every time handed out already. A node's
        work shorter than the calibrated cost of the hooks around it would otherwise end
        before it started."""
        clock = self.clock
        t = entered - clock.spent - (clock.costs.pack >> 1)
        if t <= clock.last:
            t = clock.last + 1
        clock.last = t
        return t

    def detach(self) -> None:
        """Remove every hook; safe to call twice."""
        while self._handles:
            self._handles.pop().remove()

    def annotate(self, graph: nx.DiGraph, t0: int) -> None:
        """Add ``t_backward_start_ns`` / ``t_backward_end_ns`` (ns since ``t0``) to ops and
        their enclosing layers."""
        for node_id, start in self.starts.items():
            if node_id not in graph:
                continue
            end = self.ends.get(node_id, start) - t0
            start -= t0
            while node_id is not None:
                attrs = graph.nodes[node_id]
                attrs["t_backward_start_ns"] = min(start, attrs.get("t_backward_start_ns", start))
                attrs["t_backward_end_ns"] = max(end, attrs.get("t_backward_end_ns", end))
                node_id = attrs["parent"]
