"""The forward's collectives no torch-level call shows (``barrier``, what C++ issues): the listener kept on the stack."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from torch.overrides import TorchFunctionMode

from torchgraphrec._torch import dispatch_mode_at, dispatch_mode_depth, dispatch_modes, \
    function_modes, pop_dispatch_mode, pop_function_mode, push_dispatch_mode, \
    push_function_mode
from torchgraphrec.capture.opnames import op_name_of
from torchgraphrec.capture.modestack import leave_stack
from torchgraphrec.capture.ops import dispatch_half

__all__ = ["Aside", "ForwardListening"]

_now: Callable[[], int] = time.perf_counter_ns


class Aside(TorchFunctionMode):
    """Under the op mode: takes the listener off the dispatch stack while a torch-level
    call the op mode records runs (it records its collectives, and its ATen ops need not
    pass a Python mode); the others (properties, ``size``, the profiler's) run as they come,
    the listener noting what collectives they run. Its own work stops the recording's
    clock, as the op mode's does."""

    def __init__(self, listening: "ForwardListening") -> None:
        super().__init__()
        self.listening = listening
        self.clock = listening.clock
        self._half_of = dispatch_half(self.clock.costs)
        self._halves: dict[Any, int] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        entered = _now()
        if kwargs is None:
            kwargs = {}
        half = self._halves.get(func)
        if half is None:
            half = self._halves[func] = self._half_of(func) if op_name_of(func) else -1
        if half < 0:  # not an op (a property, ``size``): the op mode notes nothing of it
            return func(*args, **kwargs)
        listening, clock = self.listening, self.clock
        mode = listening.mode
        depth = dispatch_mode_depth()
        if depth and dispatch_mode_at(depth - 1) is mode:
            pop_dispatch_mode()
            clock.spent += _now() - entered + half
            try:
                return func(*args, **kwargs)
            finally:
                returned = _now()
                push_dispatch_mode(mode)
                clock.spent += _now() - returned + half
        # a dispatch mode entered above the listener: it stays, and notes nothing meanwhile
        listening.inside += 1
        try:
            return func(*args, **kwargs)
        finally:
            listening.inside -= 1


class ForwardListening:
    """Keeps ``mode`` (the collectives' listener) on the dispatch stack while a forward is
    recorded, with :class:`Aside` under the op mode: in a forward it then sees only what runs
    between torch-level calls, ``dist.barrier()`` (gloo's runs ``c10d::barrier`` from C++)
    and the collectives C++ issues (DDP's bucket-rebuild broadcasts, a process group's
    methods called directly). Pushed before the op mode (:meth:`enter`), left after it."""

    def __init__(self, mode: Any, clock: Any) -> None:
        self.mode, self.clock = mode, clock
        self.inside = 0  # torch-level calls running while the listener could not step aside
        self.aside = Aside(self)
        self.entered = False

    def enter(self) -> None:
        """Push the listener and the watch (the op mode goes above the watch)."""
        if not self.entered:
            push_dispatch_mode(self.mode)
            push_function_mode(self.aside)
            self.entered = True

    def leave(self) -> None:
        """Take both off their stacks wherever they are (modes a user entered since and
        never left stay); safe to call twice."""
        if self.entered:
            self.entered = False
            leave_stack(self.aside, function_modes, pop_function_mode, push_function_mode)
            leave_stack(self.mode, dispatch_modes, pop_dispatch_mode, push_dispatch_mode)
