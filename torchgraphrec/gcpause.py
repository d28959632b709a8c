"""Pausing Python's cyclic garbage collector around bursts of allocation."""

from __future__ import annotations

import gc

__all__ = ["gc_paused"]


class gc_paused:  # noqa: N801 (used like a function: ``with gc_paused():``)
    """Keep the cyclic collector off inside the block, restoring its state after.

    Recording and drawing allocate many small containers that all survive; the collector's
    passes over them cost more than the work itself. Reference counting still frees
    everything that dies meanwhile. A class rather than a generator: it is entered on
    every recorded forward.

    >>> import gc
    >>> with gc_paused():
    ...     gc.isenabled()
    False
    """

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self._was_enabled:
            gc.enable()
