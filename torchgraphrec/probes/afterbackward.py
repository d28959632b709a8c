"""Reading parameters' gradients once a backward is over (under DDP, after its averaging)."""

from __future__ import annotations

from typing import Any, Callable

from torchgraphrec._torch import queue_backward_callback

__all__ = ["AfterBackward"]


class AfterBackward:
    """Collects what to read and hands it all to ``read`` when the backward is over: after
    DDP's own callback, which writes the averaged gradients and is queued once the last
    bucket is ready (so after the first one queued here: ``read`` runs from a callback that
    this one queues)."""

    def __init__(self, read: Callable[[list[tuple[Any, ...]]], None]) -> None:
        self._read = read
        self._pending: list[tuple[Any, ...]] = []

    def add(self, *item: Any) -> None:
        """Read ``item`` when the backward is over."""
        if not self._pending:
            queue_backward_callback(lambda: queue_backward_callback(self._flush))
        self._pending.append(item)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        self._read(pending)
