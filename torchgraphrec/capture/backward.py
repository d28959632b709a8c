"""Timing the backward pass per op, through hooks on the recorded autograd nodes."""

from __future__ import annotations

import time
from typing import Any, Sequence

import networkx as nx

from torchgraphrec.capture.events import OpRecord

__all__ = ["BackwardClock"]


class BackwardClock:
    """Notes when autograd starts and finishes each recorded op's backward.

    The hooks return ``None``, so gradients are untouched; every handle is removed by
    :meth:`detach`.
    """

    def __init__(self) -> None:
        self.starts: dict[str, int] = {}
        self.ends: dict[str, int] = {}
        self._handles: list[Any] = []

    @property
    def count(self) -> int:
        """How many times have been noted (changes whenever a backward ran)."""
        return len(self.starts) + len(self.ends)

    def attach(self, nodes: Sequence[Any], ops: Sequence[OpRecord]) -> None:
        """Hook each autograd node in ``nodes``, named by the matching op record."""
        starts, ends, now = self.starts, self.ends, time.perf_counter_ns
        for node, op in zip(nodes, ops):
            node_id = op[0]

            def before(grad_outputs: Any, node_id: str = node_id) -> None:
                starts.setdefault(node_id, now())

            def after(grad_inputs: Any, grad_outputs: Any, node_id: str = node_id) -> None:
                ends[node_id] = now()

            self._handles.append(node.register_prehook(before))
            self._handles.append(node.register_hook(after))

    def detach(self) -> None:
        """Remove every hook; safe to call twice."""
        while self._handles:
            self._handles.pop().remove()

    def annotate(self, graph: nx.DiGraph, t0: int) -> None:
        """Add ``t_backward_start_ns`` / ``t_backward_end_ns`` (ns since ``t0``) to ops and
        their layers."""
        for node_id, start in self.starts.items():
            end = self.ends.get(node_id, start) - t0
            start -= t0
            while node_id is not None:
                attrs = graph.nodes[node_id]
                attrs["t_backward_start_ns"] = min(start, attrs.get("t_backward_start_ns", start))
                attrs["t_backward_end_ns"] = max(end, attrs.get("t_backward_end_ns", end))
                node_id = attrs["parent"]
