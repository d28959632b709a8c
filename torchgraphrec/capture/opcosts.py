"""Counting what each recorded op cost: FLOPs (when asked) and saved activation bytes (in grad mode)."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import networkx as nx
import torch
from torch import nn
from torch.nn.parameter import is_lazy

from torchgraphrec.capture.costs import FlopMode, SavedBytes

__all__ = ["OpCosts"]

#: -1 outside a backward pass.
_graph_task_id: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", lambda: -1)


def _storages_of(modules: list[nn.Module]) -> set[int]:
    """The storages of the parameters and buffers ``modules`` hold (as the table found
    them: a walk of ``model.parameters()`` again costs more than the forward of a small
    layer)."""
    found = set()
    for module in modules:
        for tensors in (module._parameters, module._buffers):
            for tensor in tensors.values():
                if tensor is not None and not is_lazy(tensor):
                    found.add(tensor.untyped_storage()._cdata)
    return found


class OpCosts:
    """The FLOP mode and the saved-tensor hooks of one capture, and what they counted.

    FLOPs count from :meth:`start` to :meth:`stop` (a backward may run any time in
    between): in a forward, into the op running (the next op index); in a backward, into
    the op whose autograd node the backward clock says runs. Saved bytes count in each
    forward run with grad enabled.
    """

    def __init__(self, capture: Any, flops: bool) -> None:
        self.capture = capture
        self.flops: dict[int, int] = {}
        self.backward_flops: dict[str, int] = {}
        self.counting_flops = flops
        self.flop_mode = FlopMode(self._add_flops) if flops else None
        self.saved_bytes = SavedBytes(capture.events.ops)
        self._counted_saved: set[int] = set()  # the ops of forwards that counted saved bytes
        self._first_op = 0
        self._warned = False
        capture.namer.op_costs = self.of_op
        capture.tracker.on_input = self._input

    def start(self) -> None:
        if self.flop_mode is not None:
            self.flop_mode.__enter__()

    def stop(self) -> None:
        if self.flop_mode is not None:
            self.flop_mode.__exit__(None, None, None)
            self.flop_mode = None
        self.saved_bytes.pop()

    def begin_forward(self) -> None:
        """Count saved bytes in this forward, if grad mode is on and PyTorch allows it."""
        self._first_op = len(self.capture.events.ops)
        if not torch.is_grad_enabled():
            return
        if not self.saved_bytes.push(_storages_of(self.capture.table.modules)) \
                and not self._warned:
            self._warned = True
            warnings.warn("saved-tensor hooks are disabled here (torch.autograd.graph."
                          "disable_saved_tensors_hooks): recorded without saved_bytes",
                          stacklevel=3)

    def end_forward(self) -> None:
        if self.saved_bytes.active:
            self._counted_saved.update(range(self._first_op, len(self.capture.events.ops)))
        self.saved_bytes.pop()

    def _input(self, tensor: torch.Tensor) -> None:
        if self.saved_bytes.active:
            self.saved_bytes.exclude(tensor)

    def _add_flops(self, count: int) -> None:
        if _graph_task_id() >= 0:
            clock = self.capture.clock
            if clock is not None and clock.running is not None:
                self.backward_flops[clock.running] = self.backward_flops.get(clock.running, 0) \
                    + count
        elif self.capture.tracker.in_forward:
            index = len(self.capture.events.ops)
            self.flops[index] = self.flops.get(index, 0) + count

    def of_op(self, index: int) -> dict[str, int]:
        """The cost attributes of op ``index``."""
        found = {}
        if self.counting_flops:
            found["flops"] = self.flops.get(index, 0)
        if index in self._counted_saved:
            found["saved_bytes"] = self.saved_bytes.by_op.get(index, 0)
        return found

    def annotate(self, graph: nx.DiGraph) -> None:
        """Put the backward FLOPs on their ops (forward costs are named with the ops)."""
        for node_id, count in self.backward_flops.items():
            if node_id in graph:
                graph.nodes[node_id]["backward_flops"] = count
