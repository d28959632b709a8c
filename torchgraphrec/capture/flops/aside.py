"""A dispatch mode taken off the dispatch stack and put back, without leaving it or entering it again."""

from __future__ import annotations

import time
from typing import Any, Callable

from torchgraphrec._torch import dispatch_mode_at, dispatch_mode_depth, dispatch_modes, \
    pop_dispatch_mode, push_dispatch_mode, restack_dispatch_flags

__all__ = ["ModeAside"]

_depth: Callable[[], int] = dispatch_mode_depth
_push: Callable[[Any], None] = push_dispatch_mode
_pop: Callable[[], Any] = pop_dispatch_mode
_now: Callable[[], int] = time.perf_counter_ns


def _user_depth() -> int:
    """How many modes the dispatch stack holds apart from the infra modes (fake tensors,
    functionalization, tracing), which sit at its bottom whenever they were entered."""
    return sum(1 for mode in dispatch_modes() if getattr(mode, "_mode_key", None) is None)


class ModeAside:
    """Every move of an entered dispatch mode ``mode`` on the dispatch stack: off its top
    (:meth:`set_aside`), back for one call (:meth:`run_under`), back to its place
    (:meth:`put_back`), and out from wherever it is (:meth:`leave`).

    The FLOP-counting op mode sets the FLOP mode aside while it counts FLOPs itself: a
    dispatch mode costs a Python call for every ATen op. The mode is moved without being
    left or entered again, so PyTorch's flags of being in a dispatch mode stay as they were.
    While it is aside, :attr:`depth` is the stack's depth without it: a different depth
    means a dispatch mode was entered since (the op mode compares it inline, once per op).
    """

    __slots__ = ("mode", "aside", "depth", "_user_depth", "_clock")

    def __init__(self, mode: Any, clock: Any = None) -> None:
        self.mode = mode
        self._clock = clock  # stopped while the mode is pushed and popped (a Clock, or None)
        self.aside = False
        self.depth = 0
        self._user_depth = 0  # modes below the mode's place, infra modes left out

    def set_aside(self) -> bool:
        """Take the mode off the stack if it is on top (where no infra mode ever is);
        whether it was."""
        depth = _depth()
        if self.aside or not depth or dispatch_mode_at(depth - 1) is not self.mode:
            return False
        _pop()
        self.aside, self.depth = True, depth - 1
        self._user_depth = _user_depth()
        return True

    def run_under(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` with the mode (aside) on top of the stack meanwhile; pushing and
        popping it stop the clock given, as the mode's own work does."""
        started = _now()
        _push(self.mode)
        pushed = _now()
        try:
            return call(*args)
        finally:
            ended = _now()
            _pop()
            if self._clock is not None:
                self._clock.spent += pushed - started + _now() - ended

    def put_back(self) -> None:
        """Put the mode back where it was: under any mode entered since (which will leave
        first)."""
        if not self.aside:
            return
        self.aside = False
        above = [_pop() for _ in range(max(0, _user_depth() - self._user_depth))]
        _push(self.mode)
        for mode in reversed(above):
            _push(mode)

    def leave(self) -> None:
        """Leave the mode where it is on the stack: on top, or under a mode a user entered
        since and never left (a forward that raised between their hooks), which stays, with
        PyTorch's in-a-dispatch-mode flags as if the mode had never been entered."""
        self.put_back()
        if self.mode not in dispatch_modes():
            return
        above = []
        while dispatch_mode_at(_depth() - 1) is not self.mode:
            above.append(_pop())
        self.mode.__exit__(None, None, None)
        restack_dispatch_flags(above)
        for other in reversed(above):
            _push(other)
