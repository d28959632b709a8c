"""The recording's clock: ``perf_counter_ns`` stopped while the recorder does its own work."""

from __future__ import annotations

import time
from typing import Callable, Literal

from torchgraphrec.capture.calibrate import NO_COSTS, DispatchCosts

__all__ = ["Clock", "GapKind"]

#: The kinds of boundary a gap leads to, by the clock's attribute holding its least gap.
GapKind = Literal["before_call", "before_op", "before_aten", "before_end"]

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
    is after :attr:`last`, the latest one before it, by a nanosecond at least, so that times
    rise strictly in the order they were observed. Consecutive ops never overlap, and no
    two boundaries share a nanosecond: an op, a call or an autograd node is never an
    instant at its parent call's end, which no trace viewer could draw inside that call.

    In place, between a model's ops, that dispatch costs several times what it costs in a
    loop (the recorder's own work leaves the caches cold), and the rest is left in the gaps
    between the boundaries the hooks and handler observe: a call's start, an op's start (an
    ATen op's, in a fast-path module's call, apart), a call's end. Each gap gives up the
    whole of the least gap seen so far before the same kind of boundary in the recording
    (:attr:`before_call`, :attr:`before_op`, :attr:`before_aten`, :attr:`before_end`): that
    gap's dispatch and whatever Python of the model's own it held; the other gaps keep what
    they hold beyond it. The leasts start at :attr:`cap`, the most a gap gives up (where
    every gap of a kind runs Python of the model's own, it loses no more than that), so
    that the first gaps of a kind give up more than later ones would; a gap never gives up
    all of itself, so that times keep their order, and one the calibrated costs already
    overshot gives up nothing, nor, from then on, does any gap of its kind.

    The hot paths read :attr:`spent`, :attr:`last` and the least gaps and update them inline
    (a method call there costs more than the arithmetic); the methods are for everything
    else.

    >>> clock = Clock()
    >>> entered = time.perf_counter_ns()
    >>> _ = sum(range(100_000))  # the recorder's own work, say
    >>> worked = time.perf_counter_ns() - entered
    >>> clock.add_since(entered)
    >>> clock.spent >= worked > 0
    True
    """

    __slots__ = ("spent", "costs", "last", "cap", "before_call", "before_op", "before_aten",
                 "before_end")

    def __init__(self, costs: DispatchCosts = NO_COSTS) -> None:
        self.spent = 0  # ns of the recorder's own work so far
        self.last = 0  # the latest time handed out
        self.use_costs(costs)

    def use_costs(self, costs: DispatchCosts) -> None:
        """Take ``costs`` off at every event, and let a gap give up at most twice the
        greatest of them beyond that (:attr:`cap`; in place, the dispatch was seen to cost
        up to four or five times what it costs in a loop). Every least gap starts again.

        >>> from torchgraphrec.capture.calibrate import DispatchCosts
        >>> clock = Clock(DispatchCosts(call=900, op=700, python_op=2_000, pack=100))
        >>> clock.cap, clock.before_op
        (4000, 4000)
        """
        self.costs = costs
        self.cap = self.before_call = self.before_op = self.before_aten = self.before_end = \
            2 * max(costs.call, costs.op, costs.python_op)

    def now(self) -> int:
        """The time now, the recorder's own work left out (always after :attr:`last`)."""
        found = _now() - self.spent
        if found <= self.last:
            found = self.last + 1
        self.last = found
        return found

    def least_gap(self, kind: GapKind, t: int) -> int:
        """Note the gap from :attr:`last` to ``t`` (a time about to be handed out at a
        boundary of ``kind``, nothing given up yet) where it is the least of its kind so far.

        Args:
            kind: the attribute holding the least gap before such a boundary.
            t: the boundary's time before its gap gives anything up.

        Returns:
            What the gap gives up: the least where the gap is longer, else all of itself
            but the one nanosecond that keeps the boundary after :attr:`last` (none where
            the calibrated costs already overshot it).

        >>> from torchgraphrec.capture.calibrate import DispatchCosts
        >>> clock = Clock(DispatchCosts(call=250, op=0, python_op=0, pack=0))
        >>> clock.last = 1_000
        >>> clock.least_gap("before_op", 1_200), clock.before_op
        (199, 200)
        >>> clock.least_gap("before_op", 1_300), clock.before_op
        (200, 200)
        >>> clock.least_gap("before_op", 900), clock.before_op
        (0, 0)
        """
        least = getattr(self, kind)
        gap = t - self.last
        if gap < least:
            least = gap if gap > 0 else 0
            setattr(self, kind, least)
        if least < gap:
            return least
        return gap - 1 if gap > 0 else 0

    def add_since(self, entered: int) -> None:
        """Count the time since ``perf_counter_ns()`` read ``entered`` as the recorder's own."""
        self.spent += _now() - entered
