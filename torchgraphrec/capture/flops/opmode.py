"""The op mode of a recording that counts FLOPs: it counts them itself where it can."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch import nn
from torch.autograd import forward_ad

from torchgraphrec._torch import dispatch_mode_depth, function_mode_depth, \
    functorch_transforms_active, graph_task_id
from torchgraphrec.capture.flops.mode import local_shards
from torchgraphrec.capture.flops.counts import FlopCounts
from torchgraphrec.capture.flops.torchlevel import DISPATCH, FREE, shortcuts_hold, \
    torch_level_counting
from torchgraphrec.capture.ops import OpMode, OpRecorder
from torchgraphrec.capture.state import CaptureState

__all__ = ["CountingOpMode"]

_Tensor, _Parameter = torch.Tensor, nn.Parameter
_record_op = OpRecorder.record
_now: Callable[[], int] = time.perf_counter_ns
_dispatch_depth: Callable[[], int] = dispatch_mode_depth
_transforms_active: Callable[[], bool] = functorch_transforms_active
_graph_task_id: Callable[[], int] = graph_task_id  # -1 outside a backward pass


class CountingOpMode(OpMode):
    """The op mode of a recording that counts FLOPs (into ``counts``), which counts them
    itself while it is pushed, without the FLOP mode where it can: a dispatch mode costs a
    Python call for every ATen op, more than the forward itself on some models.

    While it is pushed (:meth:`push`), the FLOP mode is set aside (see
    :class:`~torchgraphrec.capture.flops.aside.ModeAside`), and each op is counted as
    :func:`~torchgraphrec.capture.flops.torchlevel.torch_level_counting` says: not at
    all, by a formula of its arguments, or by the FLOP mode put on the stack for that op
    alone; the counts are ``FlopCounterMode``'s. It does so only where nothing else could
    change what an op runs beneath it: the FLOP mode stays where it is (and counts every
    op, as outside a forward) where it is not on top of the dispatch stack when the forward
    starts or where a torch-function mode sits below this one (a user's, around
    ``record``); it goes back to its place, under any dispatch mode entered since, as soon
    as one is entered during the forward; and ops run under it one by one under
    forward-mode AD and ``torch.func`` transforms, whose tangents and batches run ATen ops
    of their own.
    """

    def __init__(self, state: CaptureState, on_failure: Callable[[BaseException], Any],
                 counts: FlopCounts) -> None:
        super().__init__(state, on_failure)
        self.flops = counts.by_op  # op index -> FLOPs
        self._aside = counts.aside
        self._ways: dict[Any, Any] = {}  # torch-level function -> how its FLOPs are counted
        self._shortcuts = shortcuts_hold()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        aside = self._aside
        if not aside.aside:
            return _record_op(self, func, types, args, kwargs)
        # what is worked out here, before the op and after it, is the recorder's time too:
        # the clock stops for it as it does for the handler's own work
        entered, clock = _now(), self._clock
        if _dispatch_depth() != aside.depth:  # a dispatch mode entered in the forward
            aside.put_back()
            clock.spent += _now() - entered
            return _record_op(self, func, types, args, kwargs)
        way = self._way(func, types, args)
        if way is FREE:
            clock.spent += _now() - entered
            return _record_op(self, func, types, args, kwargs)
        if way is DISPATCH:
            clock.spent += _now() - entered
            return aside.run_under(_record_op, self, func, types, args, kwargs)
        before = len(self._ops)
        clock.spent += _now() - entered
        out = _record_op(self, func, types, args, kwargs)
        counting = _now()
        # the op is the last one recorded: an op put in before it (a DTensor's to_local, by
        # ShardLinks) takes the index it had when it started
        index = len(self._ops) - 1 if len(self._ops) > before else before
        try:
            count = way(*local_shards(args, kwargs or {}, out))
        except Exception as exc:  # a recorder bug must never break the user's forward
            self.on_failure(exc)
            return out
        finally:
            clock.spent += _now() - counting
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
        if function_mode_depth() == 1:  # no torch-function mode of a user's below this one
            self._aside.set_aside()

    def pop(self) -> None:
        if self.pushed:
            super().pop()
            self._aside.put_back()
