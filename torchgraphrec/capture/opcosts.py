"""What each recorded op cost: its FLOPs and the bytes autograd saved for it (each when asked)."""

from __future__ import annotations

from typing import Optional

import networkx as nx
import torch
from torch import nn

from torchgraphrec.capture.flops.counts import FlopCounts
from torchgraphrec.capture.saved import SavedBytes

__all__ = ["OpCosts"]


class OpCosts:
    """The FLOP counts (``None`` without ``flops=True``) and the saved-tensor hooks
    (``None`` without ``memory=True``) of one capture, of the ops of the forwards of
    ``modules``' model, as the namer's ``op_costs`` (:meth:`put`)."""

    def __init__(self, flops: Optional[FlopCounts], saved_bytes: Optional[SavedBytes],
                 modules: list[nn.Module]) -> None:
        self.flops, self.saved_bytes, self._modules = flops, saved_bytes, modules

    def start(self) -> None:
        """Start counting FLOPs, forward and backward."""
        if self.flops is not None:
            self.flops.start()

    def stop(self) -> None:
        """Stop counting."""
        if self.flops is not None:
            self.flops.stop()
        if self.saved_bytes is not None:
            self.saved_bytes.pop()

    def begin_forward(self) -> None:
        """Count saved bytes in this forward, if asked, grad mode is on and PyTorch allows
        it."""
        if self.saved_bytes is not None:
            self.saved_bytes.begin_forward(self._modules)

    def end_forward(self) -> None:
        if self.saved_bytes is not None:
            self.saved_bytes.end_forward()

    def exclude(self, tensor: torch.Tensor) -> None:
        """Count no saved bytes for ``tensor`` (a model input, a parameter built in the
        forward)."""
        if self.saved_bytes is not None:
            self.saved_bytes.exclude(tensor)

    def of_op(self, index: int) -> dict[str, int]:
        """The cost attributes of op ``index``."""
        found = {}
        if self.flops is not None:
            found["flops"] = self.flops.by_op.get(index, 0)
        saved = self.saved_bytes.of_op(index) if self.saved_bytes is not None else None
        if saved is not None:
            found["saved_bytes"] = saved
        return found

    def put(self, first: int, attrs: list[dict]) -> None:
        """Put :meth:`of_op` of ops ``first``, ``first + 1``... on their ``attrs`` (in one
        pass: this runs for every op)."""
        flops = self.flops.by_op if self.flops is not None else None
        saved, counted = (self.saved_bytes.by_op, self.saved_bytes.counted) \
            if self.saved_bytes is not None else ({}, ())
        index = first
        for found in attrs:
            if flops is not None:
                found["flops"] = flops.get(index, 0)
            if index in counted:
                found["saved_bytes"] = saved.get(index, 0)
            index += 1

    def annotate(self, graph: nx.DiGraph) -> None:
        """Put the costs counted outside the ops' records on the graph."""
        if self.flops is not None:
            self.flops.annotate(graph)
