"""Pausing Python's cyclic garbage collector around bursts of allocation."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the cyclic collector off inside the block, restoring its state after.

    Recording and drawing allocate many small containers that all survive; the collector's
    passes over them cost more than the work itself. Reference counting still frees
    everything that dies meanwhile.

    >>> import gc
    >>> with gc_paused():
    ...     gc.isenabled()
    False
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
