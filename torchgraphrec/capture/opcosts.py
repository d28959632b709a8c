"""Counting what each recorded op cost: FLOPs (when asked) and saved activation bytes (in grad mode)."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import networkx as nx
import torch
from torch import nn
from torch.autograd import forward_ad
from torch.nn.parameter import is_lazy

from torchgraphrec._torch import dispatch_mode_at, dispatch_mode_depth, dispatch_modes, \
    function_mode_depth, functorch_transforms_active, graph_task_id, pop_dispatch_mode, \
    push_dispatch_mode
from torchgraphrec.capture.costs import UNREADABLE_HOOKS, FlopMode, SavedBytes
from torchgraphrec.capture.flopways import DISPATCH, FREE, shortcuts_hold, torch_level_counting
from torchgraphrec.capture.ops import OpMode, OpRecorder
from torchgraphrec.capture.state import CaptureState
from torchgraphrec.errors import SavedBytesNotCounted

__all__ = ["CountingOpMode", "OpCosts"]

#: Reasons for not counting saved bytes that are said once per process.
_SAID: set[str] = set()

_Tensor, _Parameter = torch.Tensor, nn.Parameter
_record_op = OpRecorder.record
_dispatch_depth: Callable[[], int] = dispatch_mode_depth
_push_dispatch: Callable[[Any], None] = push_dispatch_mode
_pop_dispatch: Callable[[], Any] = pop_dispatch_mode
_transforms_active: Callable[[], bool] = functorch_transforms_active
_graph_task_id: Callable[[], int] = graph_task_id  # -1 outside a backward pass


def _storages_of(modules: list[nn.Module]) -> set[int]:
    """The storages of the parameters and buffers ``modules`` hold (as the table found
    them: a walk of ``model.parameters()`` again costs more than the forward of a small
    layer)."""
    found = set()
    for module in modules:
        for tensors in (module._parameters, module._buffers):
            for tensor in tensors.values():
                if tensor is not None and not is_lazy(tensor):
                    found.add(tensor.untyped_storage()._cdata)
    return found


def _user_depth() -> int:
    """How many modes the dispatch stack holds apart from the infra modes (fake tensors,
    functionalization, tracing), which sit at its bottom whenever they were entered."""
    return sum(1 for mode in dispatch_modes()
               if getattr(mode, "_mode_key", None) is None)


def _leave(mode: FlopMode) -> None:
    """Leave ``mode`` where it is on the dispatch stack: on top, or under a mode a user
    entered since and never left (a forward that raised between their hooks), which stays."""
    if mode not in dispatch_modes():
        return
    above = []
    while dispatch_mode_at(_dispatch_depth() - 1) is not mode:
        above.append(_pop_dispatch())
    mode.__exit__(None, None, None)
    for other in reversed(above):
        _push_dispatch(other)


class CountingOpMode(OpMode):
    """The op mode of a recording that counts FLOPs, which counts them itself while it is
    pushed, without the FLOP mode where it can: a dispatch mode costs a Python call for
    every ATen op, more than the forward itself on some models.

    While it is pushed (:meth:`push`), the FLOP mode leaves the dispatch stack, and each op
    is counted as :func:`~torchgraphrec.capture.flopways.torch_level_counting` says: not at
    all, by a formula of its arguments, or by the FLOP mode entered for that op alone; the
    counts are ``FlopCounterMode``'s. It does so only where nothing else could change what
    an op runs beneath it: the FLOP mode stays where it is (and counts every op, as outside
    a forward) where it is not on top of the dispatch stack when the forward starts or where
    a torch-function mode sits below this one (a user's, around ``record``); it goes back to
    its place, under any dispatch mode entered since, as soon as one is entered during the
    forward; and ops run under it one by one under forward-mode AD and ``torch.func``
    transforms, whose tangents and batches run ATen ops of their own. The FLOP mode is moved
    on the stack without being left or entered again: PyTorch's flags of being in a
    dispatch mode stay as they were.
    """

    def __init__(self, state: CaptureState,
                 on_failure: Callable[[BaseException], Any] = lambda exc: None) -> None:
        super().__init__(state, on_failure)
        self.flop_mode: FlopMode | None = None
        self.flops: dict[int, int] = {}  # op index -> FLOPs (OpCosts' own dict)
        self._ways: dict[Any, Any] = {}  # torch-level function -> how its FLOPs are counted
        self._shortcuts = shortcuts_hold()
        self._direct = False  # the FLOP mode is off the stack: ops are counted here
        self._depth = 0  # the dispatch stack's depth without the FLOP mode
        self._user_depth = 0  # its modes below the FLOP mode's place, infra modes left out

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if not self._direct:
            return _record_op(self, func, types, args, kwargs)
        if _dispatch_depth() != self._depth:  # a dispatch mode entered in the forward
            self._restore()
            return _record_op(self, func, types, args, kwargs)
        way = self._way(func, types, args)
        if way is FREE:
            return _record_op(self, func, types, args, kwargs)
        if way is DISPATCH:
            _push_dispatch(self.flop_mode)
            try:
                return _record_op(self, func, types, args, kwargs)
            finally:
                _pop_dispatch()
        index = len(self._ops)
        out = _record_op(self, func, types, args, kwargs)
        try:
            count = way(args, kwargs or {}, out)
        except Exception as exc:  # a recorder bug must never break the user's forward
            self.on_failure(exc)
            return out
        if count:
            self.flops[index] = self.flops.get(index, 0) + count
        return out

    def _way(self, func: Any, types: Any, args: tuple) -> Any:
        """How this call's FLOPs are counted: as its function's are (worked out once),
        except that it runs under the FLOP mode under forward-mode AD (whose tangents run
        products of their own), with a subclass's own torch function (which may run
        anything), and where a formula would read the wrong shapes: not dense tensors
        given by position, in a backward pass, under ``torch.func`` transforms (whose
        tensors show one sample's shape)."""
        way = self._ways.get(func)
        if way is None:
            way = self._ways[func] = torch_level_counting(func) if self._shortcuts else DISPATCH
        if way is DISPATCH or forward_ad._current_level >= 0:
            return DISPATCH
        for kind in types:
            if kind is not _Tensor and kind is not _Parameter:
                return DISPATCH
        if way is FREE:
            return FREE
        if args and isinstance(args[0], _Tensor) and not args[0].is_nested and \
                _graph_task_id() < 0 and not _transforms_active():
            return way
        return DISPATCH

    def push(self) -> None:
        if self.pushed:
            return
        super().push()
        mode, depth = self.flop_mode, _dispatch_depth()
        if mode is not None and depth and dispatch_mode_at(depth - 1) is mode \
                and function_mode_depth() == 1:
            _pop_dispatch()  # the top of the stack, where no infra mode ever is
            self._direct, self._depth = True, depth - 1
            self._user_depth = _user_depth()

    def pop(self) -> None:
        if self.pushed:
            super().pop()
            self._restore()

    def _restore(self) -> None:
        """Put the FLOP mode back where it was on the dispatch stack: under any mode
        entered since (which leaves first)."""
        if not self._direct:
            return
        self._direct = False
        above = [_pop_dispatch() for _ in range(max(0, _user_depth() - self._user_depth))]
        _push_dispatch(self.flop_mode)
        for mode in reversed(above):
            _push_dispatch(mode)


class OpCosts:
    """The FLOP mode and the saved-tensor hooks of one capture, and what they counted.

    FLOPs count from :meth:`start` to :meth:`stop` (a backward may run any time in
    between): in a forward, into the op running (the next op index); in a backward, into
    the op whose autograd node the backward clock says runs. Saved bytes count in each
    forward run with grad enabled.
    """

    def __init__(self, capture: Any, flops: bool) -> None:
        self.capture = capture
        self.flops: dict[int, int] = {}
        self.backward_flops: dict[str, int] = {}
        self.counting_flops = flops
        self.flop_mode = FlopMode(self._add_flops, capture.state.clock) if flops else None
        if isinstance(capture.mode, CountingOpMode):
            capture.mode.flop_mode, capture.mode.flops = self.flop_mode, self.flops
        self.saved_bytes = SavedBytes(capture.events.ops, capture.state.clock)
        self._counted_saved: set[int] = set()  # the ops of forwards that counted saved bytes
        self._first_op = 0
        self._warned = False
        capture.namer.op_costs = self.of_op
        capture.tracker.on_input = self.exclude

    def start(self) -> None:
        if self.flop_mode is not None:
            self.flop_mode.__enter__()

    def stop(self) -> None:
        if self.flop_mode is not None:
            _leave(self.flop_mode)
            self.flop_mode = None
        self.saved_bytes.pop()

    def begin_forward(self) -> None:
        """Count saved bytes in this forward, if grad mode is on and PyTorch allows it."""
        self._first_op = len(self.capture.events.ops)
        if not torch.is_grad_enabled():
            return
        why_not = self.saved_bytes.push(_storages_of(self.capture.table.modules))
        if why_not is not None and not self._warned and why_not not in _SAID:
            self._warned = True
            if why_not is UNREADABLE_HOOKS:  # true of every recording: said once
                _SAID.add(why_not)
            warnings.warn(f"{why_not}: recorded without saved_bytes", SavedBytesNotCounted,
                          stacklevel=3)

    def end_forward(self) -> None:
        if self.saved_bytes.active:
            self._counted_saved.update(range(self._first_op, len(self.capture.events.ops)))
        self.saved_bytes.pop()

    def exclude(self, tensor: torch.Tensor) -> None:
        """Count no saved bytes for ``tensor`` (a model input, a parameter built in the
        forward)."""
        if self.saved_bytes.active:
            self.saved_bytes.exclude(tensor)

    def _add_flops(self, count: int) -> None:
        clock = self.capture.clock
        if _graph_task_id() >= 0 and clock is not None and clock.running is not None:
            self.backward_flops[clock.running] = self.backward_flops.get(clock.running, 0) + count
        elif self.capture.tracker.in_forward:  # also a backward the forward itself runs
            # (torch.autograd.grad in a forward): its FLOPs are the forward's op's
            index = len(self.capture.events.ops)
            self.flops[index] = self.flops.get(index, 0) + count

    def of_op(self, index: int) -> dict[str, int]:
        """The cost attributes of op ``index``."""
        found = {}
        if self.counting_flops:
            found["flops"] = self.flops.get(index, 0)
        if index in self._counted_saved:
            found["saved_bytes"] = self.saved_bytes.by_op.get(index, 0)
        return found

    def annotate(self, graph: nx.DiGraph) -> None:
        """Put the backward FLOPs on their ops (forward costs are named with the ops), and
        the FLOPs total of a model without ops (0: the ops' sum replaces it)."""
        if self.counting_flops:
            graph.graph["flops"] = 0
        for node_id, count in self.backward_flops.items():
            if node_id in graph:
                graph.nodes[node_id]["backward_flops"] = count
