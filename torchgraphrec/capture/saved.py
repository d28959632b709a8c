"""Counting the bytes autograd saves for the backward while each recorded op runs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from torchgraphrec._torch import SAVED_TENSOR_HOOKS_READABLE, DisableTorchFunction, \
    disable_dispatch_modes, dispatch_mode_depth, exclude_python_dispatch, \
    functorch_transforms_active, pop_saved_tensor_hooks, \
    push_saved_tensor_hooks, saved_tensor_hooks_enabled, \
    storage_weak_ref, top_saved_tensor_hooks
from torchgraphrec.capture.clock import Clock
from torchgraphrec.capture.events import OP_CALL
from torchgraphrec.capture.storages import storages_of
from torchgraphrec.errors import SavedBytesNotCounted, warn

if TYPE_CHECKING:
    from torchgraphrec.capture.state import CaptureState

__all__ = ["HELD_SAVED", "SavedBytes", "UNREADABLE_HOOKS", "written_after_saved"]

_now: Callable[[], int] = time.perf_counter_ns
_dispatch_modes: Callable[[], int] = dispatch_mode_depth
_NOT_LAZY = (nn.Parameter, torch.Tensor)  # exactly these types: is_lazy need not ask

#: How many saved tensors are held, at most, before their bytes are counted: counting a
#: batch together costs a fraction of counting each as it is saved, between the layers.
HELD_SAVED = 64

#: Reasons for not counting saved bytes that are said once per process.
_SAID: set[str] = set()

#: Why saved bytes are not counted on a torch that cannot tell which saved-tensor hooks are
#: active (only the innermost pair runs, so the recorder's would hide a user's).
UNREADABLE_HOOKS = ("this torch cannot tell which saved-tensor hooks are active "
                    "(its autograd lacks _top_saved_tensors_default_hooks), so "
                    "counting saved bytes could hide yours; newer torch releases can tell")


def _detach_keeping_type(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.detach()`` for a subclass (a DTensor, a fake tensor, any wrapper), which
    only its own ``__torch_dispatch__`` can make: with the Python key excluded the detach
    would strip it to a plain tensor, and the backward would mix the two. The dispatch
    modes step aside meanwhile, so that none sees the recorder's own detach."""
    with disable_dispatch_modes():
        return tensor.detach()


def _storages_of(modules: list[nn.Module], lazy: list[torch.Tensor]) -> set[int]:
    """The storages of the parameters and buffers ``modules`` hold (as the table found
    them: a walk of ``model.parameters()`` again costs more than the forward of a small
    layer); those not materialized yet go to ``lazy``."""
    found = set()
    for module in modules:
        for tensors in (module._parameters, module._buffers):
            if not tensors:  # most modules of deep models hold neither
                continue
            for tensor in tensors.values():
                if tensor is None:
                    continue
                if type(tensor) in _NOT_LAZY:
                    found.add(tensor.untyped_storage()._cdata)
                elif not is_lazy(tensor):  # a subclass: a DTensor's is its shard's storage
                    found.update(storage._cdata for storage in storages_of(tensor))
                else:
                    lazy.append(tensor)
    return found


class SavedBytes:
    """Saved-tensor hooks that count the bytes autograd saves for the backward while each
    op of ``ops`` runs (into :attr:`by_op`), each storage once at its full size, leaving
    out the storages :meth:`push` and :meth:`exclude` are given (parameters, the model's
    inputs). The tensor is handed on unchanged: to the pair of hooks that was active before
    (only the innermost pair runs, so the user's own offloading hooks keep working and see
    every tensor), or kept as autograd would. They count in each forward run with grad
    enabled (:meth:`begin_forward`, :meth:`end_forward`).

    A custom ``autograd.Function`` (a reentrant ``checkpoint`` too) saves what its
    ``forward`` asked for as it returns, while no op runs (``state.running``): those bytes
    go to the last op the open module call (the last of ``state.stack``) ran itself, else
    to the last op of the calls it made. Without ``state``, to the next op.
    """

    def __init__(self, ops: list, clock: Clock, state: Optional["CaptureState"] = None) -> None:
        self._ops = ops  # the ops recorded so far: the one running is the next
        self._clock = clock  # stopped while the hooks work (inside the op's own time)
        self._state = state
        # the recorder's own detach, between ops as a Function returns, is no op of the
        # model's: hidden from the op mode, as from a user's function modes
        self._quiet = DisableTorchFunction()
        self.by_op: dict[int, int] = {}  # op index -> bytes saved while it ran
        self.done: set[int] = set()  # storages counted already, or never to count
        self._outer: Any = None
        self.active = False
        self.counted: set[int] = set()  # the ops of forwards that counted saved bytes
        # (op index, tensor) saved and not counted yet (see HELD_SAVED)
        self._saved: list[tuple[int, torch.Tensor]] = []
        # weak references to the storages counted where the user's hooks take the tensors
        # (see _count_unheld)
        self._unheld: list[Any] = []
        self._first_op = 0
        self._warned = False
        #: the lazy modules' parameters and buffers, left out once the forward fills them
        #: in (in place: no module registers anything)
        self._lazy: list[torch.Tensor] = []

    def begin_forward(self, modules: list[nn.Module]) -> None:
        """Count in this forward, leaving out the storages of ``modules``' parameters and
        buffers, if grad mode is on and PyTorch allows it (else say why not, once)."""
        self._first_op = len(self._ops)
        if not torch.is_grad_enabled():
            return
        self._lazy = []
        why_not = self._why_not()
        if why_not is None:
            self.push(_storages_of(modules, self._lazy))
        elif not self._warned and why_not not in _SAID:
            self._warned = True
            if why_not is UNREADABLE_HOOKS:  # true of every recording: said once
                _SAID.add(why_not)
            warn(f"{why_not}: recorded without saved_bytes", SavedBytesNotCounted)

    def end_forward(self) -> None:
        """Stop counting at the end of a forward."""
        if self.active:
            self._count_saved()
            self.counted.update(range(self._first_op, len(self._ops)))
        self.pop()

    def _count_saved(self) -> None:
        """Count what was saved since the last count, in the order it was saved (the first
        op to save a storage has its bytes), and let go of it: autograd may free it then
        (what the forward dropped of its own graph), so each storage's record is kept as
        :meth:`_count_unheld` keeps it."""
        saved, self._saved = self._saved, []
        if self._lazy:
            self._exclude_materialized()
        for index, tensor in saved:
            for storage in storages_of(tensor):
                self._count_unheld(storage, index)

    def _exclude_materialized(self) -> None:
        """Leave out the lazy parameters and buffers filled in so far (before the op that
        saved them ran: a lazy module fills them in its pre-hook)."""
        waiting = []
        for tensor in self._lazy:
            if is_lazy(tensor):
                waiting.append(tensor)
            else:
                self.exclude(tensor)
        self._lazy = waiting

    def of_op(self, index: int) -> Optional[int]:
        """The bytes saved while op ``index`` ran; ``None`` where they were not counted."""
        return self.by_op.get(index, 0) if index in self.counted else None

    @staticmethod
    def _why_not() -> Optional[str]:
        """Why saved-tensor hooks cannot count here (``None``: they can). Asked before the
        parameters' storages are read: under ``torch.func`` they are wrappers without one."""
        if not saved_tensor_hooks_enabled():
            return ("saved-tensor hooks are disabled here "
                    "(torch.autograd.graph.disable_saved_tensors_hooks)")
        if not SAVED_TENSOR_HOOKS_READABLE:  # ours could silently take the place of a user's
            return UNREADABLE_HOOKS
        if functorch_transforms_active():
            return ("a torch.func transform (vmap, grad...) runs this forward: what it saves "
                    "is wrapped, with no storage of its own to count")
        return None

    def push(self, excluded: set[int]) -> None:
        """Start counting, leaving out the storages ``excluded`` (which it keeps and adds
        to), where :meth:`_why_not` finds nothing against it."""
        self._outer = top_saved_tensor_hooks()
        push_saved_tensor_hooks(self._pack, self._unpack)
        self.done = excluded
        self.active = True

    def exclude(self, tensor: torch.Tensor) -> None:
        """Leave ``tensor``'s storages out while counting (a model input, a parameter built
        in the forward)."""
        if self.active:
            self.done.update(storage._cdata for storage in storages_of(tensor))

    def pop(self) -> None:
        """Stop counting."""
        if self.active:
            pop_saved_tensor_hooks()
            self.active = False  # only once off: where that fails, recording's end tries again
        self.done = set()
        self._saved = []
        self._unheld = []
        self._lazy = []

    def _count(self, storage: Any, index: int) -> None:
        """Add ``storage``'s bytes to op ``index``, once."""
        key = storage._cdata
        if key not in self.done:
            self.done.add(key)
            self.by_op[index] = self.by_op.get(index, 0) + storage.nbytes()

    def _count_unheld(self, storage: Any, index: int) -> None:
        """:meth:`_count` for a storage the recorder does not hold, or holds no longer (the
        user's pack hook may let it go, autograd may free it, and then another storage could
        take its address and be taken for it): a weak reference keeps the storage's record,
        and so its address, until the forward ends, without keeping its memory."""
        if storage._cdata not in self.done:
            self._unheld.append(storage_weak_ref(storage))
        self._count(storage, index)

    def _op_saving(self) -> int:
        """The index of the op whose bytes the pack hook is counting: the op running, or
        where a custom Function returns between ops, the open call's last op (see the
        class)."""
        index, state = len(self._ops), self._state
        if state is None or state.running or index == self._first_op:
            return index
        return self._last_op_of_open_call(index, state.stack)

    def _last_op_of_open_call(self, index: int, stack: list[int]) -> int:
        """The last op the open call ran itself, else the last op of the calls it made
        (calls are numbered as they begin: the ops recorded since it began, at the end of
        the list, are those of calls numbered from it on), else the next op."""
        ops, call = self._ops, stack[-1] if stack else -1
        inner = None
        for position in range(index - 1, self._first_op - 1, -1):
            owner = ops[position][OP_CALL]
            if owner == call:
                return position
            if owner < call:
                break
            if inner is None:
                inner = position
        return index if inner is None else inner

    def _pack(self, tensor: torch.Tensor) -> Any:
        entered = _now()
        clock = self._clock
        index = self._op_saving()
        if self._outer is not None:  # the user's hooks: their work is the model's
            if self._lazy:
                self._exclude_materialized()
            for storage in storages_of(tensor):  # counted now: they may move it elsewhere
                self._count_unheld(storage, index)
            clock.spent += _now() - entered + clock.costs.pack
            # with their unpack hook: a later forward may run under other hooks (or none)
            return self._outer[0](tensor), self._outer[1], None
        if tensor.is_leaf:
            packed = tensor
        else:
            quiet = self._quiet
            quiet.__enter__()
            try:
                # _detached's usual case inline: this runs for every tensor autograd saves
                packed = _detached(tensor) if _dispatch_modes() else tensor.detach()
            finally:
                quiet.__exit__(None, None, None)
        # held until counted, as autograd holds it: its storage cannot be freed and its
        # address taken by another meanwhile; a few at a time, so that what a forward
        # drops of its own graph is freed nearly as soon as without the recorder
        saved = self._saved
        saved.append((index, packed))
        if len(saved) >= HELD_SAVED:
            self._count_saved()
        clock.spent += _now() - entered + clock.costs.pack
        # with hooks on, autograd no longer checks that a saved tensor was not written in
        # place before the backward: the version goes with it, and _unpack checks it
        return packed, packed._version

    @staticmethod
    def _unpack(packed: tuple) -> torch.Tensor:
        if len(packed) == 3:  # packed by the user's hooks, which unpack it
            return packed[1](packed[0])
        tensor, version = packed
        if tensor._version != version:
            raise RuntimeError(written_after_saved(tensor, version))
        return tensor


def written_after_saved(tensor: torch.Tensor, version: int) -> str:
    """What the backward says of a tensor saved for it and written in place since, as
    autograd says it where no saved-tensor hooks are on.

    >>> print(written_after_saved(torch.zeros(3).add_(1), 0))
    one of the variables needed for gradient computation has been modified by an inplace operation: [torch.FloatTensor [3]] is at version 1; expected version 0 instead (checked by torchgraphrec's saved-tensor hooks, memory=True, as autograd checks it without hooks)
    """
    return ("one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{tensor.type()} {list(tensor.shape)}] is at version "
            f"{tensor._version}; expected version {version} instead (checked by "
            "torchgraphrec's saved-tensor hooks, memory=True, as autograd checks it "
            "without hooks)")


def _detached(tensor: torch.Tensor) -> torch.Tensor:
    """What :class:`SavedBytes` keeps of an op's result: holding the result itself would
    make a reference cycle through its node (a leaf, with no node of its own, is kept as
    it is). The detach is the recorder's own, which no dispatch mode (its own FLOP mode, a
    user's) should see, and hiding it from them costs more than the detach."""
    if _dispatch_modes():
        if type(tensor) is not torch.Tensor:
            return _detach_keeping_type(tensor)
        with exclude_python_dispatch():
            return tensor.detach()
    return tensor.detach()
