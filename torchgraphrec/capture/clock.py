"""The recording's clock: ``perf_counter_ns`` stopped while the recorder does its own work."""

from __future__ import annotations

import time
from typing import Callable

from torchgraphrec.capture.calibrate import NO_COSTS, DispatchCosts

__all__ = ["Clock"]

_now: Callable[[], int] = time.perf_counter_ns


class Clock:
    """A clock that runs only while the model's own code runs.

    Every hook, handler and counter of the recorder adds the nanoseconds it spent on its
    own work to :attr:`spent` (measured at its entry and exit, the model's calls it makes
    on the way excluded); every time recorded is ``perf_counter_ns() - spent``. An op then
    lasts as long as its call alone, a module call as long as its ops and the user's
    Python between them. What PyTorch spends getting to each hook and handler and back,
    which they cannot time themselves, is taken off as measured once per process
    (:attr:`costs`, see :func:`~torchgraphrec.capture.calibrate.dispatch_costs`). That
    measure is an estimate, and where a call reached a handler faster than it says, the
    difference would make a time earlier than one already handed out: every time handed out
    is at least :attr:`last`, the latest one before it, so that times never decrease in the
    order they were observed and consecutive ops never overlap.

    The hot paths read :attr:`spent` and :attr:`last` and update them inline (a method call
    there costs more than the arithmetic); the methods are for everything else.

    >>> clock = Clock()
    >>> entered = time.perf_counter_ns()
    >>> _ = sum(range(100_000))  # the recorder's own work, say
    >>> worked = time.perf_counter_ns() - entered
    >>> clock.add_since(entered)
    >>> clock.spent >= worked > 0
    True
    """

    __slots__ = ("spent", "costs", "last")

    def __init__(self, costs: DispatchCosts = NO_COSTS) -> None:
        self.spent = 0  # ns of the recorder's own work so far
        self.costs = costs
        self.last = 0  # the latest time handed out

    def now(self) -> int:
        """The time now, the recorder's own work left out (never before :attr:`last`)."""
        found = _now() - self.spent
        if found < self.last:
            found = self.last
        self.last = found
        return found

    def add_since(self, entered: int) -> None:
        """Count the time since ``perf_counter_ns()`` read ``entered`` as the recorder's own."""
        self.spent += _now() - entered
