"""Python's recursion limit raised for a recorded forward, by what the recorder's hooks add."""

from __future__ import annotations

import sys

__all__ = ["RecursionHeadroom", "FRAMES_PER_LEVEL", "MARGIN"]

#: What a recorded module call adds to the recursion depth beyond a plain call: with any
#: forward hook registered, ``Module._call_impl`` runs the forward from a nested function
#: (its fast path, taken without hooks, does not).
FRAMES_PER_LEVEL = 1
#: The recorder's own frames above the deepest call: a hook, the op mode's handler and
#: what they call.
MARGIN = 64


class RecursionHeadroom:
    """Raise the recursion limit by ``extra`` inside the block, and put it back after
    unless the forward set another meanwhile: a model that nests as deep as a plain run
    allows then records too, where it would otherwise stop with a ``RecursionError``.
    Where the limit cannot be put back yet (the stack is deeper than it), it stays raised
    until a later exit, at a shallower depth, puts it back (:attr:`restored`).

    >>> before = sys.getrecursionlimit()
    >>> headroom = RecursionHeadroom(100)
    >>> with headroom:
    ...     sys.getrecursionlimit() - before
    100
    >>> sys.getrecursionlimit() == before
    True
    """

    __slots__ = ("extra", "_before", "_raised")

    def __init__(self, extra: int) -> None:
        self.extra = extra
        self._before = self._raised = 0

    def __enter__(self) -> None:
        self._before = sys.getrecursionlimit()
        self._raised = self._before + self.extra
        sys.setrecursionlimit(self._raised)

    def __exit__(self, *exc_info: object) -> None:
        if self._raised and sys.getrecursionlimit() == self._raised:
            try:
                sys.setrecursionlimit(self._before)
            except RecursionError:  # deeper than that now (a forward out of stack): later
                return
        self._raised = 0

    @property
    def restored(self) -> bool:
        """Whether the limit is back (or was set anew by someone else meanwhile)."""
        return not self._raised
