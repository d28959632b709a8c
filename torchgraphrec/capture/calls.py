"""The module hooks: each call of the model's modules, and the tensors crossing its boundary."""

from __future__ import annotations

import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, Optional

import torch
from torch.nn.modules import module as torch_module

from torchgraphrec._torch import GLOBAL_FORWARD_HOOKS_TAKE_KWARGS, DisableTorchFunction, \
    autograd_sequence_number, call_kwargs, call_kwargs_readable, current_frame, \
    give_call_kwargs, global_pre_hook_takes_kwargs_by_id, graph_task_id, \
    register_global_forward_hook, take_call_kwargs
from torchgraphrec.capture.callfaults import raised_note, unnested_error
from torchgraphrec.capture.events import TENSOR_CALL, CallRecord
from torchgraphrec.capture.fastpath import SCRIPTED_TYPES
from torchgraphrec.capture.ownhooks import OwnHook, call_ended
from torchgraphrec.capture.rootcall import RootCall, RootEnd
from torchgraphrec.capture.state import CaptureState
from torchgraphrec.capture.structures import flatten_tensors, input_names, output_names
from torchgraphrec.capture.values import ENTRY_REF, ENTRY_TENSOR, ENTRY_VERSION, grad_fn_of
from torchgraphrec.capture.weakcall import weak_method

__all__ = ["CallTracker"]

_Tensor = torch.Tensor
_now = time.perf_counter_ns
_thread_id = threading.get_ident
_frame = current_frame
_call_kwargs = call_kwargs
_autograd_number: Callable[[], int] = autograd_sequence_number
#: -1 outside a backward pass; module calls made during one (checkpoint recomputation)
#: are part of the backward, not new forward calls.
_graph_task_id: Callable[[], int] = graph_task_id


class CallTracker:
    """A global pre-hook (which reads each call's keyword arguments before the call runs,
    see :func:`~torchgraphrec._torch.call_kwargs_readable`) and a global post-hook, filtered to the model's modules,
    the recording thread and forward passes.

    A top-level call is a *forward*: ``on_begin`` runs before its inputs are noted and
    ``on_end`` after its outputs. ``boundary_role`` is the role of a tensor crossing a
    call's boundary that nothing observed being made (``"constant"`` where every op is
    seen; ``None`` where ops are not seen, and the call that returned it, or the caller
    that passed it on, made it).
    """

    def __init__(self, state: CaptureState, on_begin: Callable[[], None],
                 on_end: Callable[[], None], boundary_role: Optional[str]) -> None:
        self.state = state
        self.events = state.events
        self._index_of = state.table.index_of
        self._parents = state.table.parents  # the same list, as modules are added to it
        self.on_begin, self.on_end = on_begin, on_end
        self.boundary_role = boundary_role
        self.breaks: list[tuple[int, int, int]] = []  # (autograd number, call, time)
        self.keep_breaks = state.autograd
        self.forward_start = 0  # the index of the current forward's top-level call
        self.in_forward = False
        self.failure: BaseException | None = None
        self.done = False  # set to stop recording (after the first forward, say)
        self.call_edges = False  # edges tensor -> layer -> tensor (no ops recorded)
        self._fed: set[int] = set()  # tensor records with an edge from the call that made them
        self.switch: Any = None  # a FastPathSwitch, where ops are recorded
        self.on_input: Optional[Callable[[torch.Tensor], None]] = None  # each model input
        self.keep_grad_fns = False  # keep the model outputs' grad_fn (for the backward clock)
        self.output_grad_fns: list[Any] = []
        # each call's index and output as it ends (where the forward did not raise)
        self.on_output: Optional[Callable[[int, Any], None]] = None
        self._handles: list[Any] = []
        # the global pre-hook's id, where the modules hand it their calls' keyword arguments
        # (reading them from the caller's frame costs more than a small layer's hook)
        self._pre_hook_id: Optional[int] = None
        self._kwargs_tables: list[dict] = []
        self._thread = -1
        self._quiet = DisableTorchFunction()
        # the notes this tracker added in the forward running: an exception that carries
        # one was noted by an inner call. Holding the exception itself would hold its
        # frames, whose activations' saved-tensor hooks (memory=True) hold this tracker,
        # a cycle through autograd that the collector cannot see, and the model for good
        self._notes: set[str] = set()
        #: where the forward's top-level call runs; a forward cut short ends as it goes
        self._root = RootCall(weak_method(self._ended_unseen))  # no cycle with it
        self._root_end = RootEnd(weak_method(self._post_hook), GLOBAL_FORWARD_HOOKS_TAKE_KWARGS)
        # what reaching a hook costs (see Clock): a quarter of it is spent before the hook
        # runs, half around it, as read once here rather than in every hook
        self._quarter = state.clock.costs.call >> 2
        self._half = state.clock.costs.call >> 1

    def attach(self) -> None:
        """Start listening (on the calling thread)."""
        self._thread = threading.get_ident()
        if call_kwargs_readable():
            by_id = global_pre_hook_takes_kwargs_by_id()  # its probe call before our hook
            handle = torch_module.register_module_forward_pre_hook(self._pre_hook)
            self._handles.append(handle)
            if by_id:
                self._pre_hook_id = handle.id
        if GLOBAL_FORWARD_HOOKS_TAKE_KWARGS:
            self._handles.append(register_global_forward_hook(
                self._post_hook, with_kwargs=True, always_call=True))
        self.adopt(self.state.table.modules)

    def adopt(self, modules: list[torch.nn.Module]) -> None:
        """Hook each of ``modules`` itself where global hooks cannot serve: a pre-hook where
        the call's frame cannot be read (correct, but hooks on a ``TransformerEncoderLayer``
        turn off its fast path), a post-hook where global ones take no keyword arguments.
        Also given the modules a forward builds as it runs."""
        if self._pre_hook_id is not None:
            self._kwargs_tables += give_call_kwargs(modules, self._pre_hook_id)
        if GLOBAL_FORWARD_HOOKS_TAKE_KWARGS and call_kwargs_readable():
            return  # the global hooks serve every module (the loop below would hook none)
        for module in modules:
            if isinstance(module, SCRIPTED_TYPES):  # it refuses hooks of its own
                if not GLOBAL_FORWARD_HOOKS_TAKE_KWARGS:
                    # no post-hook would see its calls end (torch 2.4): the pre-hook skips
                    # them too
                    self._index_of.pop(id(module), None)
                continue
            if not call_kwargs_readable():
                self._handles.append(module.register_forward_pre_hook(OwnHook(self._pre_hook),
                                                                      with_kwargs=True))
            if not GLOBAL_FORWARD_HOOKS_TAKE_KWARGS:
                self._handles.append(module.register_forward_hook(
                    OwnHook(self._module_post_hook), with_kwargs=True, always_call=True))

    def detach(self) -> None:
        """Stop listening; safe to call twice."""
        self._root.clear()  # a forward cut short would keep its locals alive
        self._root_end.release()
        while self._handles:
            self._handles.pop().remove()
        if self._pre_hook_id is not None:
            take_call_kwargs(self._kwargs_tables, self._pre_hook_id)
            self._kwargs_tables, self._pre_hook_id = [], None

    # The hooks run between layers, whose compute leaves the caches cold: each is one
    # function with the one-tensor case inline, since in place every extra call and object
    # costs several times what it costs in a microbenchmark.

    def _pre_hook(self, module: torch.nn.Module, args: tuple,
                  kwargs: Optional[dict] = None) -> None:
        entered = _now()  # the call starts now; the rest is the recorder's own work
        # only the model's modules, on the recording thread, outside a backward pass
        # (checkpoint recomputation), while the recorder is healthy and wants more
        if self._thread != _thread_id() or _graph_task_id() >= 0 or self.failure is not None \
                or self.done:
            self._wind_down()
            return
        module_index = self._index_of.get(id(module))
        if module_index is None:
            return
        if kwargs is None:
            kwargs = _call_kwargs(_frame())
        quiet = self._quiet
        quiet.__enter__()
        clock = self.state.clock
        # the gap since the last time handed out gives up the least before a call so far,
        # PyTorch's dispatch that the calibrated cost leaves in it (see Clock)
        given_up = clock.before_call
        t = entered - clock.spent - self._quarter - given_up
        if t <= clock.last:  # a least this gap is at or below, or a calibrated cost it overshot
            given_up = clock.least_gap("before_call", t + given_up)
            t = clock.last + 1
        clock.last = t
        try:
            state, events = self.state, self.events
            stack, calls = state.stack, events.calls
            # a call from outside the open call's module: the last forward may be cut short
            if stack and self._parents[module_index] != calls[stack[-1]].module \
                    and self._root.left_behind() and self._close_left_behind():
                return
            if not stack:
                inputs = self._begin_forward(_frame().f_back, module, args, kwargs, t)
                parent = -1
            else:
                parent = stack[-1]
                inputs = self._call_inputs(args, kwargs, t, parent)
            index = len(calls)
            number = _autograd_number() if self.keep_breaks else 0
            events.seq += 1
            call = CallRecord(module_index, parent, len(stack), events.seq, t, number,
                              module.training, inputs)
            calls.append(call)
            stack.append(index)
            if self.switch is not None and module_index in self.switch.modules:
                self.switch.enter(index, module, args, kwargs)
            if self.keep_breaks:
                self.breaks.append((number, index, t))
            if self.call_edges:
                self._edges_into(index, inputs, t)
        except Exception as exc:  # a recorder bug must never break the user's forward
            self._fail(exc)
        finally:
            quiet.__exit__(None, None, None)
            clock.spent += _now() - entered + self._half + given_up

    def _begin_forward(self, caller: FrameType, module: torch.nn.Module, args: tuple, kwargs: dict,
                       t: int) -> list:
        """A forward starts with the call of ``module`` (from ``caller``'s frame) at ``t``:
        its watch, its state, its inputs' nodes."""
        self._root.start(caller)
        self._root_end.begin(module)
        self.forward_start = len(self.events.calls)
        self.in_forward = True
        self._notes = set()
        self.on_begin()
        return self._model_inputs(module, args, kwargs, t)

    def _ended_unseen(self) -> None:
        """The top-level call's frames went while its forward was open: a ``BaseException``
        the user caught cut it short, with no hook of ours to end it."""
        if self.in_forward:
            try:
                self._close_left_behind()
            except Exception as exc:  # noqa: BLE001 - reported when recording stops
                self.fail(exc)

    def _close_left_behind(self) -> bool:
        """End the open forward, which no post-hook will end (cut short, or the recorder
        failed): its open calls stay open, as when recording stops mid-forward. Returns
        whether recording is done (``first_only``)."""
        self.state.stack.clear()
        self.in_forward = False
        self._root.clear()
        self._root_end.drop()
        self.on_end()
        return self.done

    def _call_inputs(self, args: tuple, kwargs: dict, t: int, parent: int) -> list:
        """The tensor refs a nested call reads (its arguments' values at ``t``)."""
        state = self.state
        if not kwargs and type(args) is tuple and len(args) == 1 and isinstance(args[0], _Tensor):
            x = args[0]
            entry = state.values.current.get(id(x))
            ref = entry[ENTRY_REF] if entry is not None and entry[ENTRY_TENSOR]() is x else None
            if type(ref) is int and ref < 0:
                try:  # inline: this runs for nearly every call
                    version = state.values.read(x)
                except RuntimeError:  # an inference tensor
                    version = state.values.read_safely()(x)
                if entry[ENTRY_VERSION] == version:
                    return [ref]  # a tensor node already: the usual case
            return [state.boundary(x, t, parent, self.boundary_role)]
        return [state.boundary(x, t, parent, self.boundary_role)
                for x in flatten_tensors((args, kwargs))]

    def _model_inputs(self, module: torch.nn.Module, args: tuple, kwargs: dict,
                      t: int) -> list:
        """The top-level call's inputs, named by the ``forward`` parameters they were bound to."""
        state, events = self.state, self.events
        refs = []
        for name, tensor in input_names(module.forward, args, kwargs):
            if self.on_input is not None:
                self.on_input(tensor)
            ref = state.boundary(tensor, t, -1, "input")
            if type(ref) is int and events.roles.get(~ref) == "input":
                events.names.setdefault(~ref, name)
            refs.append(ref)
        return refs

    def _module_post_hook(self, module: torch.nn.Module, args: tuple, kwargs: dict,
                          output: Any) -> None:
        """The post-hook as a module's own hook (torch 2.4's: see ``call_ended``)."""
        call_ended(self._post_hook, module, args, kwargs, output, _frame())

    def _post_hook(self, module: torch.nn.Module, args: tuple, *rest: Any) -> None:
        entered = _now()  # the call ended as this hook began
        if self._thread != _thread_id() or _graph_task_id() >= 0 or self.failure is not None \
                or self.done:
            self._wind_down()
            return
        module_index = self._index_of.get(id(module))
        if module_index is None:
            return
        quiet = self._quiet
        quiet.__enter__()
        clock = self.state.clock
        given_up = clock.before_end
        t = entered - clock.spent - self._quarter - given_up
        if t <= clock.last:  # a least this gap is at or below, or a calibrated cost it overshot
            given_up = clock.least_gap("before_end", t + given_up)
            t = clock.last + 1
        clock.last = t
        try:
            state, calls = self.state, self.events.calls
            stack = state.stack
            if not stack or calls[stack[-1]].module != module_index:
                if len(rest) == 1:  # raised before our pre-hook ran (a user's global one
                    return  # raised first): a call that never began for the recorder
                raise unnested_error(module_index, stack, calls, state.table)
            if len(stack) == 1 and self._root_end.pending is not None and \
                    self._root_end.defers(module, len(rest) > 1):
                return  # the model's own hooks run next: the forward ends after them
            index = stack.pop()
            call = calls[index]
            call.t_end = t
            # torch calls an always_call hook as (module, args, None), without the kwargs
            # it otherwise passes, exactly when the forward raised
            if len(rest) == 1:
                self._note(sys.exc_info()[1], index)
            elif not stack:
                call.outputs = self._model_outputs(index, rest[1], t)
            elif isinstance(rest[1], _Tensor):
                call.outputs = [state.boundary(rest[1], t, index, self.boundary_role)]
            else:
                call.outputs = [state.boundary(x, t, index, self.boundary_role)
                                for x in flatten_tensors(rest[1])]
            if self.keep_breaks:
                call.seq_end = _autograd_number()
                self.breaks.append((call.seq_end, call.parent, t))
            if self.call_edges:
                self._edges_out(index, call.outputs, t)
            if self.on_output is not None and len(rest) > 1:
                self.on_output(index, rest[1])
            if self.switch is not None:
                self.switch.leave(index)
            if not stack:
                self.in_forward = False
                self._root.clear()
                self.on_end()
        except Exception as exc:
            self._fail(exc)
        finally:
            quiet.__exit__(None, None, None)
            clock.spent += _now() - entered + self._half + given_up

    def _model_outputs(self, index: int, output: Any, t: int) -> list:
        """The top-level call's outputs, named by their path in what it returned. A value
        returned as it came in (an input, a parameter, a constant, an earlier forward's
        output) gets an output node of its own, fed by the node it was; a tensor returned
        at several paths is named by the first."""
        state, events = self.state, self.events
        refs, named, passed = [], set(), {}
        for name, tensor in output_names(output):
            ref = state.boundary(tensor, t, index, self.boundary_role)
            if type(ref) is not int or (events.roles.get(~ref) is not None and ref not in named):
                if ref not in passed:
                    passed[ref] = ~state.passed_through(tensor, ref, index, t)
                    self._fed.add(~passed[ref])  # its edge is from what it was, not the call
                ref = passed[ref]
            if ref not in named:
                named.add(ref)
                state.values.remember(tensor, ~ref)  # a later forward may take it in
                events.roles[~ref] = "output"
                events.names[~ref] = name
            if self.keep_grad_fns and not state.chains.too_deep:
                self.output_grad_fns.append(grad_fn_of(tensor))
            refs.append(ref)
        return refs

    def _edges_into(self, index: int, inputs: list, t: int) -> None:
        """Without ops: each tensor the call received, and what the caller's own code made
        of those (a residual sum, a flatten in its forward) from the caller."""
        events, fed = self.events, self._fed
        caller = events.calls[index].parent
        for ref in dict.fromkeys(inputs):
            if type(ref) is not int:
                continue
            if caller >= 0 and ~ref not in fed and events.tensors[~ref][TENSOR_CALL] == caller:
                fed.add(~ref)
                events.boundary_edges.append((("call", caller), ref, events.next_seq(), t))
            events.boundary_edges.append((ref, ("call", index), events.next_seq(), t))

    def _edges_out(self, index: int, outputs: list, t: int) -> None:
        events, fed = self.events, self._fed
        for ref in dict.fromkeys(outputs):
            if type(ref) is int and ~ref not in fed and events.tensors[~ref][TENSOR_CALL] == index:
                fed.add(~ref)
                events.boundary_edges.append((("call", index), ref, events.next_seq(), t))

    def _note(self, exc: BaseException | None, index: int) -> None:
        if exc is None or not hasattr(exc, "add_note"):
            return
        notes = getattr(exc, "__notes__", ())
        if any(note in self._notes for note in notes):  # noted by an inner call's hook
            return
        note = raised_note(exc, index, self.events.calls, self.state.table, self._index_of)
        self._notes.add(note)
        if note not in notes:  # a second recorder on the same model noted it
            exc.add_note(note)

    def fail(self, exc: Exception) -> None:
        """Note the recorder's own failure (reported when recording stops); record no more."""
        self.failure = self.failure or exc

    def _fail(self, exc: Exception) -> None:
        self.fail(exc)
        self._wind_down()

    def _wind_down(self) -> None:
        """End the forward a failure cut short (from a hook: an op mode cannot pop itself
        while its own handler runs)."""
        if self.failure is not None and self.in_forward and self._thread == _thread_id():
            self._close_left_behind()
