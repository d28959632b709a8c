"""The FLOPs of one capture: each forward op's, and each op's in the backward."""

from __future__ import annotations

import weakref
from typing import Any, Callable

import networkx as nx

from torchgraphrec._torch import graph_task_id
from torchgraphrec.capture.clock import Clock
from torchgraphrec.capture.flops.aside import ModeAside
from torchgraphrec.capture.flops.mode import FlopMode
from torchgraphrec.capture.weakcall import weak_method

__all__ = ["FlopCounts"]

_graph_task_id: Callable[[], int] = graph_task_id  # -1 outside a backward pass


class FlopCounts:
    """The FLOP mode of one capture (entered from :meth:`start` to :meth:`stop`, a
    backward may run any time in between, and moved on the dispatch stack through
    :attr:`aside`), and what it counted: in a forward, into the op running (the next index
    of ``ops``, in :attr:`by_op`); in a backward, into the op whose autograd node the
    ``backward`` clock says runs (in :attr:`backward`, by op id).

    ``tracker`` says whether a forward is running (``in_forward``); ``backward`` is the
    capture's :class:`~torchgraphrec.capture.backward.BackwardClock`, or ``None``.
    """

    def __init__(self, ops: list, clock: Clock, tracker: Any, backward: Any) -> None:
        # the tracker holds this (through the op modes of its switch): no cycle with it
        self._ops, self._tracker, self._backward = ops, weakref.proxy(tracker), backward
        self.by_op: dict[int, int] = {}  # op index -> FLOPs (the counting op mode adds too)
        self.backward: dict[str, int] = {}  # op id -> FLOPs of its backward
        self.aside = ModeAside(FlopMode(self._add, clock, weak_method(tracker.fail)), clock)

    def start(self) -> None:
        """Enter the FLOP mode."""
        self.aside.mode.__enter__()

    def stop(self) -> None:
        """Leave the FLOP mode, wherever it is on the dispatch stack."""
        self.aside.leave()

    def _add(self, count: int) -> None:
        backward = self._backward
        if _graph_task_id() >= 0 and backward is not None and backward.running is not None:
            self.backward[backward.running] = self.backward.get(backward.running, 0) + count
        elif self._tracker.in_forward:  # also a backward the forward itself runs
            # (torch.autograd.grad in a forward): its FLOPs are the forward's op's
            index = len(self._ops)
            self.by_op[index] = self.by_op.get(index, 0) + count

    def annotate(self, graph: nx.DiGraph) -> None:
        """Put the backward FLOPs on their ops, 0 on those whose backward ran and counted
        none (forward FLOPs are named with the ops), and the FLOPs total of a model without
        ops (0: the ops' sum replaces it)."""
        graph.graph["flops"] = 0
        for node_id, count in self.backward.items():
            if node_id in graph:
                graph.nodes[node_id]["backward_flops"] = count
        # an op whose backward ran and counted nothing (a ReLU's) has 0: the totals then
        # say a backward was counted, also where all of it counts 0
        for node_id in self._backward.timed() if self._backward is not None else ():
            if node_id in graph:
                graph.nodes[node_id].setdefault("backward_flops", 0)
