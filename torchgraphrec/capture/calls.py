"""The module hooks: each call of the model's modules, and the tensors crossing its boundary."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Optional

import torch
from torch.nn.modules import module as torch_module

from torchgraphrec.capture.events import CallRecord
from torchgraphrec.capture.state import CaptureState
from torchgraphrec.capture.structures import flatten_tensors, input_names, output_names

__all__ = ["CallTracker"]

_Tensor = torch.Tensor
_now = time.perf_counter_ns
_thread_id = threading.get_ident
_autograd_number: Callable[[], int] = torch.autograd._get_sequence_nr  # type: ignore[attr-defined]
#: -1 outside a backward pass; module calls made during one (checkpoint recomputation)
#: are part of the backward, not new forward calls.
_graph_task_id: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", lambda: -1)


class CallTracker:
    """Per-module pre-hooks (which see keyword arguments before the call runs) and one
    global post-hook, filtered to the recording thread and to forward passes.

    A top-level call is a *forward*: ``on_begin`` runs before its inputs are noted and
    ``on_end`` after its outputs. ``boundary_role`` is the role of a tensor a call returns
    that nothing observed being made (``"constant"`` where every op is seen, ``None`` where
    the call is taken to have made it).
    """

    def __init__(self, state: CaptureState, on_begin: Callable[[], None],
                 on_end: Callable[[], None], boundary_role: Optional[str]) -> None:
        self.state = state
        self.events = state.events
        self._index_of = state.table.index_of
        self.on_begin, self.on_end = on_begin, on_end
        self.boundary_role = boundary_role
        self.breaks: list[tuple[int, int, int]] = []  # (autograd number, call, time)
        self.keep_breaks = state.autograd
        self.forward_start = 0  # the index of the current forward's top-level call
        self.failure: BaseException | None = None
        self.done = False  # set to stop recording (after the first forward, say)
        self.call_edges = False  # edges tensor -> layer -> tensor (no ops recorded)
        self.keep_grad_fns = False  # keep the model outputs' grad_fn (for the backward clock)
        self.output_grad_fns: list[Any] = []
        self._handles: list[Any] = []
        self._thread = -1
        self._quiet = torch._C.DisableTorchFunction()
        self._noted: BaseException | None = None

    def attach(self) -> None:
        """Start listening (on the calling thread)."""
        self._thread = threading.get_ident()
        for module in self.state.table.modules:
            self._handles.append(module.register_forward_pre_hook(self._pre_hook,
                                                                  with_kwargs=True))
        self._handles.append(torch_module.register_module_forward_hook(
            self._post_hook, with_kwargs=True, always_call=True))

    def detach(self) -> None:
        """Stop listening; safe to call twice."""
        while self._handles:
            self._handles.pop().remove()

    def _ignored(self, module: torch.nn.Module) -> Optional[int]:
        """The module's index, or ``None`` for a call not to record: another thread, a
        backward pass (checkpoint recomputation), a failed or finished recorder."""
        if self._thread != _thread_id() or _graph_task_id() >= 0 or self.failure is not None \
                or self.done:
            return None
        return self._index_of.get(id(module))

    def _pre_hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        index = self._ignored(module)
        if index is None:
            return
        self._quiet.__enter__()
        try:
            self._enter(module, index, args, kwargs)
        except Exception as exc:  # a recorder bug must never break the user's forward
            self._fail(exc)
        finally:
            self._quiet.__exit__(None, None, None)

    def _enter(self, module: torch.nn.Module, module_index: int, args: tuple,
               kwargs: dict) -> None:
        state, events = self.state, self.events
        stack, calls = state.stack, events.calls
        if not stack:
            self.forward_start = len(calls)
            self.on_begin()
        t = _now()
        parent = stack[-1] if stack else -1
        if parent < 0:
            inputs = self._model_inputs(module, args, kwargs, t)
        elif not kwargs and type(args) is tuple and len(args) == 1 \
                and isinstance(args[0], _Tensor):
            inputs = [state.boundary(args[0], t, parent, "constant")]
        else:
            inputs = [state.boundary(x, t, parent, "constant")
                      for x in flatten_tensors((args, kwargs))]
        index = len(calls)
        number = _autograd_number() if self.keep_breaks else 0
        call = CallRecord(module_index, parent, len(stack), events.next_seq(), t, number,
                          module.training)
        call.inputs = inputs
        calls.append(call)
        stack.append(index)
        if self.keep_breaks:
            self.breaks.append((number, index, t))
        if self.call_edges:
            self._edges_into(index, inputs, t)

    def _model_inputs(self, module: torch.nn.Module, args: tuple, kwargs: dict,
                      t: int) -> list:
        """The top-level call's inputs, named by the ``forward`` parameters they were bound to."""
        state, events = self.state, self.events
        refs = []
        for name, tensor in input_names(module.forward, args, kwargs):
            ref = state.boundary(tensor, t, -1, "input")
            if type(ref) is int and events.roles.get(~ref) == "input":
                events.names.setdefault(~ref, name)
            refs.append(ref)
        return refs

    def _post_hook(self, module: torch.nn.Module, args: tuple, *rest: Any) -> None:
        module_index = self._ignored(module)
        if module_index is None:
            return
        self._quiet.__enter__()
        try:
            # torch calls an always_call hook as (module, args, None), without the kwargs it
            # otherwise passes, exactly when the forward raised
            raised = len(rest) == 1
            self._leave(module_index, None if raised else rest[1], raised)
        except Exception as exc:
            self._fail(exc)
        finally:
            self._quiet.__exit__(None, None, None)

    def _leave(self, module_index: int, output: Any, raised: bool) -> None:
        state, calls = self.state, self.events.calls
        stack = state.stack
        if not stack or calls[stack[-1]].module != module_index:
            raise RuntimeError("module calls did not nest: a forward hook was skipped")
        t = _now()
        index = stack.pop()
        call = calls[index]
        call.t_end = t
        if raised:
            self._note(sys.exc_info()[1], index)
        elif not stack:
            call.outputs = self._model_outputs(index, output, t)
        elif isinstance(output, _Tensor):
            call.outputs = [state.boundary(output, t, index, self.boundary_role)]
        else:
            call.outputs = [state.boundary(x, t, index, self.boundary_role)
                            for x in flatten_tensors(output)]
        if self.keep_breaks:
            call.seq_end = _autograd_number()
            self.breaks.append((call.seq_end, call.parent, t))
        if self.call_edges:
            self._edges_out(index, call.outputs, t)
        if not stack:
            self.on_end()

    def _model_outputs(self, index: int, output: Any, t: int) -> list:
        """The top-level call's outputs, named by their path in what it returned."""
        state, events = self.state, self.events
        refs = []
        for name, tensor in output_names(output):
            ref = state.boundary(tensor, t, index, self.boundary_role)
            if type(ref) is int:
                state.values.remember(tensor, ~ref)  # a later forward may take it in
                if events.roles.get(~ref) in (None, "output"):
                    events.roles[~ref] = "output"
                    events.names.setdefault(~ref, name)
            if self.keep_grad_fns and not state.too_deep:
                self.output_grad_fns.append(tensor.grad_fn)
            refs.append(ref)
        return refs

    def _edges_into(self, index: int, inputs: list, t: int) -> None:
        events = self.events
        for ref in dict.fromkeys(inputs):
            if type(ref) is int:
                events.boundary_edges.append((ref, ("call", index), events.next_seq(), t))

    def _edges_out(self, index: int, outputs: list, t: int) -> None:
        events = self.events
        for ref in dict.fromkeys(outputs):
            if type(ref) is int and events.tensors[~ref][6] == index:
                events.boundary_edges.append((("call", index), ref, events.next_seq(), t))

    def _note(self, exc: BaseException | None, index: int) -> None:
        if exc is None or exc is self._noted or not hasattr(exc, "add_note"):
            return
        self._noted = exc
        calls, table = self.events.calls, self.state.table
        module = calls[index].module
        qualname = table.qualnames[module] or "<root>"
        call_index = sum(1 for other in calls[:index] if other.module == module)
        note = (f"torchgraphrec: raised in the call of {qualname!r} "
                f"({table.types[module]}, call_index {call_index})")
        if note not in getattr(exc, "__notes__", ()):  # a second recorder on the same model
            exc.add_note(note)

    def _fail(self, exc: Exception) -> None:
        self.failure = exc
        if self.state.stack:
            self.state.stack.clear()
            self.on_end()
