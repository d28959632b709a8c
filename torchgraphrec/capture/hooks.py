"""The forward hooks, which note module calls and boundary tensors, and naming them after."""

from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import Any, Callable

import torch
from torch.nn.modules import module as torch_module

from torchgraphrec.capture.events import CallRecord, Events, RawTensor, TensorRecord, layer_id
from torchgraphrec.capture.structures import flatten_tensors, input_names, output_names
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.gcpause import gc_paused

__all__ = ["CallTracker", "TensorDescriber"]

_Tensor = torch.Tensor
_peek_sequence_nr: Callable[[], int] = torch.autograd._get_sequence_nr  # type: ignore[attr-defined]
_now = time.perf_counter_ns
_thread_id = threading.get_ident
#: -1 outside a backward pass; module calls made during one (checkpoint recomputation)
#: are part of the backward, not new forward calls.
_graph_task_id: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", lambda: -1)


def _unique_ids(indices: list[int], tensors: list[TensorRecord]) -> tuple[str, ...]:
    if len(indices) == 1:
        return (tensors[indices[0]].node_id,)
    return tuple(dict.fromkeys([tensors[i].node_id for i in indices]))


class TensorDescriber:
    """A tensor's shape, label, dtype and device as the schema's plain values, each
    distinct one converted once.

    The conversions are shared by all describers (up to :attr:`LIMIT` shapes): the same
    shape tuples then serve every recording, and once the collector has seen that they hold
    only integers it stops tracking them, and the node dicts that hold them.

    >>> describe = TensorDescriber()
    >>> x = torch.zeros(2, 3)
    >>> describe(x.shape, x.dtype, x.device)
    ((2, 3), '(2, 3)', 'float32', 'cpu')
    """

    LIMIT = 4096
    _shapes: dict[Any, tuple[tuple[int, ...], str]] = {}
    _names: dict[Any, str] = {}

    def __call__(self, shape: Any, dtype: Any, device: Any) -> tuple[tuple[int, ...], str, str, str]:
        described = self._shapes.get(shape) or self._shape(shape)
        names = self._names
        dtype_name = names.get(dtype) or self._name(dtype)
        return described[0], described[1], dtype_name, names.get(device) or self._name(device)

    def shape_and_dtype(self, shape: Any, dtype: Any) -> tuple[tuple[int, ...], str]:
        """Only the shape tuple and the dtype's name (what a parameter node keeps)."""
        described = self._shapes.get(shape) or self._shape(shape)
        return described[0], self._names.get(dtype) or self._name(dtype)

    def _shape(self, shape: Any) -> tuple[tuple[int, ...], str]:
        shapes = self._shapes
        if len(shapes) >= self.LIMIT:
            shapes.clear()
        plain = tuple(shape)
        described = shapes[shape] = (plain, str(plain))
        return described

    def _name(self, value: Any) -> str:
        name = self._names[value] = str(value).replace("torch.", "")
        return name


def _version_of(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # inference tensors keep no version counter
        return 0


class CallTracker:
    """Global module hooks, filtered to one model's modules and one thread.

    The hooks append raw records to :class:`Events` and hand each finished top-level call
    (a *session*) to ``on_session_end``, which gives the records their ids and attributes
    (:meth:`describe_pending`) and walks the session's autograd graph while it is alive.
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
        self.session_start = 0  # the index of the current top-level call in events.calls
        self.failure: BaseException | None = None
        self.observer: Any = None  # a ProbeEngine, when the recorder has probes
        self.first_only = False  # record the graph of the first top-level forward only
        self.graph_done = False
        self._objects: dict[int, tuple[weakref.ref, dict[int, int], int]] = {}
        self._numbers = 0
        self._call_counts: dict[int, int] = {}
        self.first_call: dict[int, int] = {}  # filled by describe_pending()
        self._described_calls = 0
        self._raw: list[RawTensor] = []  # tensors seen since describe_pending() last ran
        self.describe = TensorDescriber()
        self._handles: list[Any] = []
        self._thread = -1
        self._gc: gc_paused | None = None  # held from a forward's start to its end
        self._noted: BaseException | None = None
        self.names: dict[int, str] = {}  # tensor record index -> the model input's or output's name

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
        return entry[1].get(_version_of(tensor))

    def see(self, tensor: torch.Tensor, call: int, t: int) -> int:
        """The record index for ``tensor`` as it is now, made on first sight; ``call`` is
        the call that produced it (-1: none, a model input)."""
        objects = self._objects
        entry = objects.get(id(tensor))
        if entry is None or entry[0]() is not tensor:  # new, or a dead tensor's id reused
            entry = objects[id(tensor)] = (weakref.ref(tensor), {}, self._numbers)
            self._numbers += 1
        try:
            version = tensor._version
        except RuntimeError:  # inference tensors keep no version counter
            version = 0
        versions = entry[1]
        index = versions.get(version)
        if index is None:
            events, raw = self.events, self._raw
            index = versions[version] = len(events.tensors) + len(raw)
            events.seq += 1
            grad_fn = tensor.grad_fn
            raw.append((entry[2], version, tensor.shape, tensor.dtype, tensor.device,
                        tensor.requires_grad, call, events.seq, t, grad_fn,
                        tensor.output_nr if grad_fn is not None else 0))
        elif index < len(self.events.tensors):
            record = self.events.tensors[index]
            if record.grad_fn is None and tensor.grad_fn is not None:
                # seen in an earlier top-level call, whose walk let go of its grad_fn
                record.grad_fn, record.output_nr = tensor.grad_fn, tensor.output_nr
        return index

    # The two hooks run between layers, whose compute leaves the caches cold: they are kept
    # to one function each, with the one-tensor case inline, since in place every extra
    # call and object costs several times what it costs in a microbenchmark.

    def _pre_hook(self, module: torch.nn.Module, args: tuple) -> None:
        # Record only the model's own modules, on the recording thread, outside a backward
        # pass (checkpoint recomputation), while the recorder is healthy.
        if self._thread != _thread_id() or _graph_task_id() >= 0 or self.failure is not None:
            return
        module_index = self._index_of.get(id(module))
        if module_index is None:
            return
        try:
            if not self.graph_done:
                t, seq = _now(), _peek_sequence_nr()
                stack, events = self.stack, self.events
                if stack:
                    parent = stack[-1]
                else:
                    parent = -1
                    self._begin_session()
                if type(args) is tuple and len(args) == 1 and isinstance(args[0], _Tensor):
                    inputs = [self.see(args[0], parent, t)]
                else:
                    inputs = [self.see(x, parent, t) for x in flatten_tensors(args)]
                index = len(events.calls)
                events.seq += 1
                events.calls.append(CallRecord(module_index, parent, len(stack), events.seq, t,
                                               seq, inputs))
                stack.append(index)
                self.breaks.append((seq, index, t))
            if self.observer is not None:
                self._observe_enter(module_index, args)
        except Exception as exc:  # a recorder bug must never break the user's forward
            self._fail(exc)

    def _post_hook(self, module: torch.nn.Module, args: tuple, *rest: Any) -> Any:
        if self._thread != _thread_id() or _graph_task_id() >= 0 or self.failure is not None:
            return None
        module_index = self._index_of.get(id(module))
        if module_index is None:
            return None
        try:
            # torch calls an always_call hook as (module, args, None), without the kwargs it
            # otherwise passes, exactly when the forward raised
            raised = len(rest) == 1
            kwargs, output = ({}, None) if raised else rest
            if self.graph_done:
                return self._observe_leave(module_index, kwargs, output, raised)
            t, seq = _now(), _peek_sequence_nr()
            stack, calls = self.stack, self.events.calls
            if not stack or calls[stack[-1]].module != module_index:
                raise RuntimeError("module calls did not nest: a forward hook was skipped")
            index = stack.pop()
            call = calls[index]
            call.t_end, call.seq_end = t, seq
            if kwargs:
                call.inputs += [self.see(x, call.parent, call.t_start)
                                for x in flatten_tensors(kwargs)]
            if raised:
                self._note(sys.exc_info()[1], index)
            elif isinstance(output, _Tensor):
                call.outputs = [self.see(output, index, t)]
            else:
                call.outputs = [self.see(x, index, t) for x in flatten_tensors(output)]
            edited = None if self.observer is None else \
                self._observe_leave(module_index, kwargs, output, raised)
            self.breaks.append((seq, call.parent, t))
            if not stack:
                if not raised:
                    self._name_boundary(module, args, kwargs, output)
                self._end_session()
            return edited
        except Exception as exc:
            self._fail(exc)
            return None

    def _name_boundary(self, module: torch.nn.Module, args: tuple, kwargs: dict,
                       output: Any) -> None:
        names = self.names
        for name, tensor in input_names(module.forward, args, kwargs):
            index = self.lookup(tensor)
            if index is not None:
                names.setdefault(index, name)
        for name, tensor in output_names(output):
            index = self.lookup(tensor)
            if index is not None:
                names.setdefault(index, name)

    def describe_pending(self) -> None:
        """Give the calls and tensors recorded since the last time their node ids and
        attributes, in the schema's plain values."""
        events, table = self.events, self.table
        calls, tensors, t0 = events.calls, events.tensors, events.t0
        counts, first_call = self._call_counts, self.first_call
        new_calls = range(self._described_calls, len(calls))
        for index in new_calls:
            call = calls[index]
            module = call.module
            call_index = counts.get(module, 0)
            counts[module] = call_index + 1
            if not call_index:
                first_call[module] = index
            qualname = table.qualnames[module]
            call.node_id = layer_id(qualname, call_index)
            call.attrs = {
                "kind": "layer", "label": table.labels[module],
                "parent": calls[call.parent].node_id if call.parent >= 0 else None,
                "depth": call.depth, "seq": call.seq, "qualname": qualname,
                "type": table.types[module], "call_index": call_index,
                "t_start_ns": call.t_start - t0, "t_end_ns": call.t_end - t0,
                "num_params": 0,  # counted when the graph is built
                "settings": table.settings(module),
                "training": table.modules[module].training,
            }
        describe, raw = self.describe, self._raw
        self._raw = []
        for number, version, shape, dtype, device, requires_grad, call, seq, t, grad_fn, \
                output_nr in raw:
            plain_shape, label, dtype_name, device_name = describe(shape, dtype, device)
            if call >= 0:
                producer = calls[call]
                parent, depth = producer.node_id, producer.depth + 1
            else:
                parent, depth = None, 0
            tensors.append(TensorRecord(f"tensor:{number}@v{version}", {
                "kind": "tensor", "label": label, "parent": parent, "depth": depth,
                "seq": seq, "shape": plain_shape, "dtype": dtype_name, "device": device_name,
                "requires_grad": requires_grad, "role": "intermediate", "version": version,
            }, call, t, grad_fn, output_nr))
        for index in new_calls:  # now that every tensor has its id
            call = calls[index]
            call.attrs["inputs"] = _unique_ids(call.inputs, tensors)
            call.attrs["outputs"] = _unique_ids(call.outputs, tensors)
        self._described_calls = len(calls)

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
        call = self.events.calls[index]
        qualname = self.table.qualnames[call.module] or "<root>"
        call_index = sum(1 for other in self.events.calls[:index] if other.module == call.module)
        note = (f"torchgraphrec: raised in the call of {qualname!r} "
                f"({self.table.types[call.module]}, call_index {call_index})")
        if note not in getattr(exc, "__notes__", ()):  # a second recorder on the same model
            exc.add_note(note)

    def _begin_session(self) -> None:
        self.session_start = len(self.events.calls)
        # The collector's passes over the many small records made during capture cost
        # about half a forward on deep models; it is off for the forward only.
        if self._gc is None:
            self._gc = gc_paused()
            self._gc.__enter__()

    def _end_session(self) -> None:
        try:
            self.on_session_end(self)
        finally:
            self.breaks = []
            self.graph_done = self.first_only
            self._restore_gc()

    def _restore_gc(self) -> None:
        if self._gc is not None:
            self._gc.__exit__()
            self._gc = None

    def _fail(self, exc: Exception) -> None:
        self.failure = exc
        self.stack.clear()
        self._restore_gc()
