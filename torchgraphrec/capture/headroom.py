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


#: The blocks open, in the order they began.
_OPEN: list["RecursionHeadroom"] = []
#: The limit before the first open block, and the limit they set last.
_LIMIT = [0, 0]


def _set_limit() -> None:
    """The limit before the first open block, plus each open block's ``extra``."""
    limit = _LIMIT[0] + sum(block.extra for block in _OPEN)
    sys.setrecursionlimit(limit)
    _LIMIT[1] = limit


class RecursionHeadroom:
    """Raise the recursion limit by ``extra`` inside the block, and put it back after
    unless the forward set another meanwhile: a model that nests as deep as a plain run
    allows then records too, where it would otherwise stop with a ``RecursionError``.
    Where the limit cannot be put back yet (the stack is deeper than it), it stays raised
    until a later exit, at a shallower depth, puts it back (:attr:`restored`).

    Blocks may end in any order (two recorders of one model end their forwards in the
    order their hooks were registered): the limit is the one before the first block plus
    the ``extra`` of those still open. A limit set while blocks are open (by the model)
    stays: those blocks put nothing back.

    >>> before = sys.getrecursionlimit()
    >>> first, second = RecursionHeadroom(100), RecursionHeadroom(10)
    >>> first.__enter__(); second.__enter__()
    >>> sys.getrecursionlimit() - before
    110
    >>> first.__exit__(); sys.getrecursionlimit() - before
    10
    >>> second.__exit__(); sys.getrecursionlimit() == before
    True
    """

    __slots__ = ("extra", "_raised")

    def __init__(self, extra: int) -> None:
        self.extra = extra
        self._raised = False

    def __enter__(self) -> None:
        current = sys.getrecursionlimit()
        if _OPEN and current != _LIMIT[1]:  # the model set a limit: the open blocks keep it
            for block in _OPEN:
                block._raised = False
            _OPEN.clear()
        if not _OPEN:
            _LIMIT[0] = current
        _OPEN.append(self)
        self._raised = True
        _set_limit()

    def __exit__(self, *exc_info: object) -> None:
        if not self._raised:
            return
        # (it may be gone already: an exit cut short by a KeyboardInterrupt, now run again)
        if self in _OPEN:
            _OPEN.remove(self)
        if sys.getrecursionlimit() != _LIMIT[1]:  # the forward set another: it stays
            self._raised = False
            return
        try:
            _set_limit()
        except RecursionError:  # deeper than that now (a forward out of stack): later
            _OPEN.append(self)
            return
        self._raised = False

    @property
    def restored(self) -> bool:
        """Whether the limit is back (or was set anew by someone else meanwhile)."""
        return not self._raised
