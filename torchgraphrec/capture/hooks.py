"""The forward hooks: they note module calls and boundary tensors, and nothing more."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from typing import Any, Callable

import torch
from torch.nn.modules import module as torch_module

from torchgraphrec.capture.events import CallRecord, Events, TensorRecord
from torchgraphrec.capture.structures import flatten_tensors
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.gcpause import gc_paused

__all__ = ["CallTracker"]

_peek_sequence_nr: Callable[[], int] = torch.autograd._get_sequence_nr  # type: ignore[attr-defined]
_now = time.perf_counter_ns
_thread_id = threading.get_ident
#: -1 outside a backward pass; module calls made during one (checkpoint recomputation)
#: are part of the backward, not new forward calls.
_graph_task_id: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", lambda: -1)


def _version_of(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # inference tensors keep no version counter
        return 0


class CallTracker:
    """Global module hooks, filtered to one model's modules and one thread.

    The hooks append records to :class:`Events` and hand each finished top-level call (a
    *session*) to ``on_session_end``, which walks its autograd graph while it is alive.
    Breakpoints ``(sequence_nr, call, time)`` mark which call was innermost from which
    autograd sequence number on, so that ops can be attributed by their ``_sequence_nr``.
    """

    def __init__(self, table: ModuleTable, events: Events,
                 on_session_end: Callable[["CallTracker"], None]) -> None:
        self.table = table
        self._index_of = table.index_of
        self.events = events
        self.on_session_end = on_session_end
        self.stack: list[int] = []
        self.breaks: list[tuple[int, int, int]] = []
        self.session_calls: list[int] = []
        self.failure: BaseException | None = None
        self.observer: Any = None  # a ProbeEngine, when the recorder has probes
        self.first_only = False  # record the graph of the first top-level forward only
        self.graph_done = False
        self._objects: dict[int, tuple[weakref.ref, int]] = {}
        self._versions: dict[tuple[int, int], int] = {}
        self._numbers = 0
        self.first_call: dict[int, int] = {}
        self._handles: list[Any] = []
        self._thread = -1
        self._gc = contextlib.ExitStack()  # holds gc_paused() from a forward's start to end
        self._noted: BaseException | None = None

    def attach(self) -> None:
        """Start listening (on the calling thread)."""
        self._thread = threading.get_ident()
        self.events.t0 = _now()
        self._handles.append(torch_module.register_module_forward_pre_hook(self._pre_hook))
        self._handles.append(torch_module.register_module_forward_hook(
            self._post_hook, with_kwargs=True, always_call=True))

    def detach(self) -> None:
        """Stop listening; safe to call twice."""
        while self._handles:
            self._handles.pop().remove()
        self._restore_gc()

    def lookup(self, tensor: torch.Tensor) -> int | None:
        """The index of the record already made for ``tensor`` at its current version."""
        entry = self._objects.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return self._versions.get((entry[1], _version_of(tensor)))

    def see(self, tensor: torch.Tensor, parent: int, t: int) -> int:
        """The record index for ``tensor`` as it is now, made on first sight."""
        entry = self._objects.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            entry = self._objects[id(tensor)] = (weakref.ref(tensor), self._numbers)
            self._numbers += 1
        key = (entry[1], _version_of(tensor))
        index = self._versions.get(key)
        if index is None:
            events = self.events
            index = self._versions[key] = len(events.tensors)
            events.tensors.append(TensorRecord(key[0], key[1], tensor, parent, events.next_seq(), t))
        elif self.events.tensors[index].grad_fn is None and tensor.grad_fn is not None:
            # seen in an earlier top-level call, whose walk let go of its grad_fn: link again
            record = self.events.tensors[index]
            record.grad_fn, record.output_nr = tensor.grad_fn, tensor.output_nr
        return index

    def _watched(self, module: torch.nn.Module) -> int | None:
        """The module's index if this call is one to record: one of the model's modules, on
        the recording thread, outside a backward pass, with the recorder still healthy."""
        if self._thread != _thread_id() or _graph_task_id() >= 0 or self.failure is not None:
            return None
        return self._index_of.get(id(module))

    def _pre_hook(self, module: torch.nn.Module, args: tuple) -> None:
        module_index = self._watched(module)
        if module_index is None:
            return
        try:
            if self.graph_done:
                self._observe_enter(module_index, args)
                return
            self._enter(module_index, args)
        except Exception as exc:  # a recorder bug must never break the user's forward
            self._fail(exc)

    def _post_hook(self, module: torch.nn.Module, args: tuple, *rest: Any) -> Any:
        module_index = self._watched(module)
        if module_index is None:
            return None
        try:
            # torch calls an always_call hook as (module, args, None), without the kwargs it
            # otherwise passes, exactly when the forward raised
            raised = len(rest) == 1
            kwargs, output = ({}, None) if raised else rest
            if self.graph_done:
                return self._observe_leave(module_index, kwargs, output, raised)
            return self._leave(module_index, kwargs, output, raised)
        except Exception as exc:
            self._fail(exc)
            return None

    def _enter(self, module_index: int, args: tuple) -> None:
        t, seq = _now(), _peek_sequence_nr()
        stack, events = self.stack, self.events
        if not stack:
            self._begin_session()
        parent = stack[-1] if stack else -1
        see = self.see
        inputs = [see(x, parent, t) for x in flatten_tensors(args)]
        index = len(events.calls)
        events.calls.append(CallRecord(module_index, parent, events.next_seq(), t, seq, inputs))
        stack.append(index)
        self.first_call.setdefault(module_index, index)
        self.session_calls.append(index)
        self.breaks.append((seq, index, t))
        self._observe_enter(module_index, args)

    def _leave(self, module_index: int, kwargs: dict, output: Any, raised: bool) -> Any:
        t, seq = _now(), _peek_sequence_nr()
        stack = self.stack
        if not stack or self.events.calls[stack[-1]].module != module_index:
            raise RuntimeError("module calls did not nest: a forward hook was skipped")
        index = stack.pop()
        call = self.events.calls[index]
        call.t_end, call.seq_end = t, seq
        if kwargs:
            call.inputs += [self.see(x, call.parent, call.t_start) for x in flatten_tensors(kwargs)]
        if raised:
            self._note(sys.exc_info()[1], index)
        else:
            see = self.see
            call.outputs = [see(x, index, t) for x in flatten_tensors(output)]
        edited = self._observe_leave(module_index, kwargs, output, raised)
        self.breaks.append((seq, call.parent, t))
        if not stack:
            self._end_session()
        return edited

    def _observe_enter(self, module_index: int, args: tuple) -> None:
        if self.observer is not None and self.observer.watches(module_index):
            self.observer.on_enter(module_index, args)

    def _observe_leave(self, module_index: int, kwargs: dict, output: Any, raised: bool) -> Any:
        if self.observer is None or not self.observer.watches(module_index):
            return None
        if raised:  # the call is over all the same: the observer closes it, recording nothing
            self.observer.on_raise(module_index)
            return None
        return self.observer.on_leave(module_index, kwargs, output)

    def _note(self, exc: BaseException | None, index: int) -> None:
        if exc is None or exc is self._noted or not hasattr(exc, "add_note"):
            return
        self._noted = exc
        calls = self.events.calls
        call = calls[index]
        qualname = self.table.qualnames[call.module] or "<root>"
        call_index = sum(1 for other in calls[:index] if other.module == call.module)
        note = (f"torchgraphrec: raised in the call of {qualname!r} "
                f"({self.table.types[call.module]}, call_index {call_index})")
        if note not in getattr(exc, "__notes__", ()):  # a second recorder on the same model
            exc.add_note(note)

    def _begin_session(self) -> None:
        # The collector's passes over the many small records made during capture cost
        # about half a forward on deep models; it is off for the forward only.
        self._gc.enter_context(gc_paused())

    def _end_session(self) -> None:
        try:
            self.on_session_end(self)
        finally:
            self.breaks = []
            self.session_calls = []
            self.graph_done = self.first_only
            self._restore_gc()

    def _restore_gc(self) -> None:
        self._gc.close()

    def _fail(self, exc: Exception) -> None:
        self.failure = exc
        self.stack.clear()
        self._restore_gc()
