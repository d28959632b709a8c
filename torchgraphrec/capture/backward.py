"""Timing the backward pass per op, through hooks on the autograd nodes each op made."""

from __future__ import annotations

import bisect
import time
from typing import Any, Callable, Optional, Sequence

import networkx as nx
import torch

from torchgraphrec._torch import autograd_sequence_number, graph_task_id
from torchgraphrec.capture.autograd import walk
from torchgraphrec.capture.clock import Clock

__all__ = ["BackwardClock", "owners"]

_graph_task_id: Callable[[], int] = graph_task_id  # the backward pass running
_autograd_number: Callable[[], int] = autograd_sequence_number
_grad_enabled: Callable[[], bool] = torch.is_grad_enabled


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
    :meth:`detach`. Times are kept by op node id and backward pass (autograd's graph task),
    the earliest start and latest end over the autograd nodes an op owns in that pass, read
    from the recording's ``clock``, which the hooks' own work does not advance. A backward
    that builds a graph of its own (``create_graph=True``) makes nodes for each op's
    derivative: they are hooked as they are made, under that op, so that a later pass
    through them (a gradient penalty's) is timed and counted too.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.starts: dict[tuple[str, int], int] = {}  # (op node id, pass) -> start
        self.ends: dict[tuple[str, int], int] = {}  # (op node id, pass) -> end
        self.count = 0  # hook runs so far: changes with every backward, repeated ones too
        self.running: Optional[str] = None  # the op whose autograd node runs now
        self._handles: list[Any] = []

    def attach(self, pairs: Sequence[tuple[Any, str]]) -> None:
        """Hook each autograd node in ``pairs``, timed under the op node id it is paired with."""
        starts, ends, clock, now = self.starts, self.ends, self.clock, time.perf_counter_ns
        for node, node_id in pairs:
            made_from: list[int] = []  # the sequence number its derivative's nodes start at

            # autograd calling a hook costs about what it costs to call a pack hook: half
            # before it, half after
            def before(grad_outputs: Any, node_id: str = node_id,
                       made_from: list[int] = made_from) -> None:
                entered = now()
                starts.setdefault((node_id, _graph_task_id()), self._time(entered))
                self.running = node_id
                self.count += 1
                if _grad_enabled():  # create_graph: this node's work makes nodes
                    made_from.append(_autograd_number())
                clock.spent += now() - entered + clock.costs.pack

            def after(grad_inputs: Any, grad_outputs: Any, node_id: str = node_id,
                      made_from: list[int] = made_from) -> None:
                entered = now()
                key = (node_id, _graph_task_id())
                ends[key] = max(ends.get(key, 0), self._time(entered))
                self.running = None
                self.count += 1
                if made_from:
                    self._attach_derivative(grad_inputs, made_from.pop(), node_id)
                clock.spent += now() - entered + clock.costs.pack

            self._handles.append(node.register_prehook(before))
            self._handles.append(node.register_hook(after))

    def _attach_derivative(self, grad_inputs: Any, low: int, node_id: str) -> None:
        """Hook the autograd nodes a node of op ``node_id`` made while it ran (numbered from
        ``low`` on), reached from the gradients it returned, under that op."""
        try:
            starts = [grad.grad_fn for grad in grad_inputs if isinstance(grad, torch.Tensor)]
            found = walk(starts, low, _autograd_number())
        except Exception:  # noqa: BLE001 - the user's backward runs on without them
            return
        self.attach([(node, node_id) for _, node, _ in found])

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

    def timed(self) -> set[str]:
        """The op node ids whose backward ran."""
        return {node_id for node_id, _ in self.starts}

    def annotate(self, graph: nx.DiGraph, t0: int) -> None:
        """Add ``t_backward_start_ns`` / ``t_backward_end_ns`` (ns since ``t0``) to ops and
        their enclosing layers: from the first pass's start to the last's end, and where
        more than one pass ran through a node, ``t_backward_spans_ns``: each pass's start
        and end, in turn."""
        spans: dict[Any, dict[int, list[int]]] = {}  # node -> pass -> [start, end]
        for (node_id, task), start in self.starts.items():
            if node_id not in graph:
                continue
            end = self.ends.get((node_id, task), start) - t0
            start -= t0
            while node_id is not None:
                span = spans.setdefault(node_id, {}).get(task)
                if span is None:
                    spans[node_id][task] = [start, end]
                else:
                    span[0], span[1] = min(start, span[0]), max(end, span[1])
                node_id = graph.nodes[node_id]["parent"]
        for node_id, by_pass in spans.items():
            ordered = sorted(by_pass.values())
            attrs = graph.nodes[node_id]
            attrs["t_backward_start_ns"] = ordered[0][0]
            attrs["t_backward_end_ns"] = max(end for _, end in ordered)
            if len(ordered) > 1:
                attrs["t_backward_spans_ns"] = tuple(t for span in ordered for t in span)
