"""The torch-function mode that records every torch-level call a forward makes as an op."""

from __future__ import annotations

import time
import types
import weakref
from typing import Any, Callable, Optional, Sequence

import torch
from torch.overrides import TorchFunctionMode

from torchgraphrec._torch import DisableTorchFunction, autograd_sequence_number, \
    function_mode_depth, function_modes, pop_function_mode, push_function_mode
from torchgraphrec.capture.calibrate import DispatchCosts
from torchgraphrec.capture.clock import GapKind
from torchgraphrec.capture.collectives import collective_call
from torchgraphrec.capture.modestack import leave_stack
from torchgraphrec.capture.opnames import ALL_TENSORS, NO_KWARGS, SET_DATA, SHARED_COUNTS, \
    TENSOR, UNPACK_DUAL, mutates_by_name, op_name_of
from torchgraphrec.capture.schemas import view_source, written_by_schema
from torchgraphrec.capture.state import CaptureState, Uninitialized, read_shape
from torchgraphrec.capture.values import ENTRY_REF, ENTRY_TENSOR, ENTRY_VERSION, \
    inference_written, version_of

__all__ = ["OpMode", "OpRecorder", "dispatch_half"]

_Tensor = torch.Tensor
_SEQUENCES = (list, tuple)
_ALIASES = frozenset({"data", "detach"})
_now = time.perf_counter_ns
_ref = weakref.ref
_autograd_number: Callable[[], int] = autograd_sequence_number


def _scan(values: Any, inputs: list, plain: list) -> None:
    """Collect the tensors in ``values`` (into lists and tuples at any depth, as in
    ``torch.cat([a, b])`` or ``y[:, [i, j]]``) into ``inputs``, and ``values`` with tensors
    replaced by :data:`TENSOR` into ``plain`` (so that a record keeps no activation alive).

    >>> a, b = torch.zeros(1), torch.ones(1)
    >>> inputs, plain = [], []
    >>> _scan((a, [1, (b, 2)], "x"), inputs, plain)
    >>> [t is u for t, u in zip(inputs, (a, b))], plain
    ([True, True], [t, (1, (t, 2)), 'x'])
    """
    for value in values:
        if isinstance(value, _Tensor):
            inputs.append(value)
            plain.append(TENSOR)
        elif type(value) in _SEQUENCES:
            plain.append(_scan_sequence(value, inputs))
        else:
            plain.append(value)


def _scan_sequence(value: Any, inputs: list) -> Any:
    """A list or tuple with its tensors (at any depth) collected into ``inputs`` and
    replaced by :data:`TENSOR` (a tuple), or ``value`` itself where it holds none."""
    for item in value:
        if isinstance(item, _Tensor) or type(item) in _SEQUENCES:
            break
    else:  # the usual: sizes, dims, slices
        return value
    found = len(inputs)
    plain = tuple(TENSOR if isinstance(item, _Tensor) and not inputs.append(item)
                  else _scan_sequence(item, inputs) if type(item) in _SEQUENCES else item
                  for item in value)
    return plain if len(inputs) > found else value


class _BackwardFrom:
    """What an op record reads of a ``backward()`` run inside the forward, which returns
    nothing: the shape and dtype of the tensor it started from, and no node of its own."""

    __slots__ = ("shape", "dtype", "grad_fn")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.shape, self.dtype, self.grad_fn = tensor.shape, tensor.dtype, None


class _NoOps(dict):
    """What a failed mode looks names up in: nothing is an op any more."""

    def get(self, key: Any, default: Any = None) -> tuple[str, int]:
        return ("", 0)


_NO_OPS = _NoOps()


def dispatch_half(costs: DispatchCosts) -> Callable[[Any], int]:
    """Half of what reaching a torch-function mode's handler costs for a function, in ns:
    through ``torch.overrides.handle_torch_function`` for the Python functions of
    ``torch.nn.functional`` and ``torch.Tensor``, from C++ for the others. (The other half
    is spent on the way back.)

    >>> half = dispatch_half(DispatchCosts(call=0, op=800, python_op=2400, pack=0))
    >>> half(torch.nn.functional.relu), half(torch.nn.functional.linear)
    (1200, 400)
    """
    return lambda func: (costs.python_op if isinstance(func, types.FunctionType)
                         else costs.op) // 2


class OpRecorder:
    """What records an op per call that returns a tensor or changes one in place: the
    handler of the op mode and of the ATen-level mode (:meth:`record`), and what it reads,
    the same objects for the recorder's life, kept at hand.

    Args:
        state: what the hooks and both modes share.
        name_of: an op's name for a function (``""``: not an op).
        half_of: half of what reaching the handler costs for a function, in ns.
        on_failure: called with the recorder's own exception (the forward goes on).
        written_by_schema: where the version of a tensor changed in place is counted only
            after the handler returns (at the ATen level), find it by the op's schema.
        gap_kind: the clock's least gap before this mode's ops: ``"before_aten"`` for the
            ATen ops of a fast-path module's call, which a fused kernel or a decomposition
            issues back to back, with next to no gap, and which would otherwise leave the
            torch-level ops' least gap near 0.
        hold_results: keep every result alive until :meth:`release`: where C++ alone holds
            a result between ops (TorchScript, a fused kernel), torch gives it a new Python
            object at its next use unless the first one lives on, and only that object's
            identity names the value.

    The handler runs between the model's ops, whose compute leaves the caches cold: it is
    one function with the common cases inline, since there every extra call and object
    costs several times what it costs in a microbenchmark. Its own work, before and after
    the call it records, stops the recording's clock (see
    :class:`~torchgraphrec.capture.clock.Clock`): an op's times are its call's alone.
    A subclass is a mode too; this ``__init__`` goes on to the mode's own.
    """

    def __init__(self, state: CaptureState, name_of: Callable[[Any], str],
                 half_of: Callable[[Any], int], on_failure: Callable[[BaseException], Any],
                 written_by_schema: bool = False, gap_kind: GapKind = "before_op",
                 hold_results: bool = False) -> None:
        super().__init__()
        self.state = state
        self.on_failure = on_failure
        self._values, self._current, self._stack = state.values, state.values.current, state.stack
        self._events, self._ops, self._chains = state.events, state.events.ops, state.chains
        self._clock = state.clock
        self._name_of, self._half_of = name_of, half_of
        #: func -> (its op name, half of what dispatching it costs in ns): one lookup per call
        self._known: dict[Any, tuple[str, int]] = {}
        self._guard: Any = None  # hides the handler's own reads from the modes below
        self._written_by_schema = written_by_schema
        self._gap_kind = gap_kind
        self._aten = gap_kind == "before_aten"  # read per op: a test costs less than getattr
        self._held: Optional[list] = [] if hold_results else None

    def record(self, func: Any, types: Any, args: tuple = (),
               kwargs: dict | None = None) -> Any:
        """Call ``func`` and note it as an op (the modes' ``__torch_function__`` and
        ``__torch_dispatch__``)."""
        entered = _now()
        if kwargs is None:
            kwargs = NO_KWARGS
        clock = self._clock
        known = self._known.get(func)
        if known is None:
            known = self._known[func] = (self._name_of(func), self._half_of(func))
        name, half = known
        if not name:
            clock.spent += _now() - entered + half + half
            return func(*args, **kwargs)
        guard = self._guard
        if guard is not None:
            guard.__enter__()
        number = _autograd_number()
        for value in args:
            if not isinstance(value, _Tensor):
                scanned: list = []
                plain: Any = []
                _scan(args, scanned, plain)
                inputs: Sequence = scanned
                plain = tuple(plain)
                break
        else:  # the usual op: tensors only, kept as given (a list only where kwargs add)
            inputs = args
            plain = ALL_TENSORS[len(args)] if len(args) < SHARED_COUNTS else (TENSOR,) * len(args)
        plain_kwargs = kwargs  # torch's dict or NO_KWARGS: kept as it is where it holds no tensor
        for value in kwargs.values():
            if isinstance(value, _Tensor) or type(value) in _SEQUENCES:
                values: list = []
                scanned = list(inputs)
                _scan(kwargs.values(), scanned, values)
                inputs = scanned
                plain_kwargs = dict(zip(kwargs, values))
                break
        read = self._values.read
        try:
            versions = list(map(read, inputs))
        except RuntimeError:  # an inference tensor keeps no version counter
            read = self._values.read_safely()
            versions = list(map(read, inputs))
        events = self._events
        seq_before = events.seq
        if guard is not None:
            guard.__exit__(None, None, None)
        state = self.state
        state.running += 1
        called = _now()
        # the gap since the last time handed out gives up the least before an op of this
        # mode's level so far (see Clock); what runs inside the call starts after t0
        given_up = clock.before_aten if self._aten else clock.before_op
        t0 = entered - clock.spent - half - given_up
        if t0 <= clock.last:  # a least this gap is at or below, or a calibrated cost overshot
            given_up = clock.least_gap(self._gap_kind, t0 + given_up)
            t0 = clock.last + 1
        clock.last = t0
        clock.spent += called - entered + half + given_up
        try:
            out = func(*args, **kwargs)
        except BaseException:
            state.running -= 1
            raise
        returned = _now()
        state.running -= 1
        t1 = returned - clock.spent  # less what the recorder's hooks took inside the call
        if t1 <= clock.last:  # after the last time handed out inside the call, or t0
            t1 = clock.last + 1
        clock.last = t1
        if guard is not None:
            guard.__enter__()
        try:
            made = _autograd_number() - number
            after = list(map(read, inputs))
            changed = None if after == versions else \
                [(tensor, version) for tensor, old, version in zip(inputs, versions, after)
                 if version != old]
            if changed is None and self._written_by_schema:
                changed = written_by_schema(func, args, kwargs)
            elif changed is None and versions and min(versions) < 0:  # an inference tensor:
                changed = [(target, inference_written(target) if target.is_inference()
                            else version_of(target))  # by the op's name
                           for target in mutates_by_name(name, args, kwargs)] or None
            if isinstance(out, _Tensor):
                if changed is None:
                    for tensor in inputs:
                        if tensor is out:  # one of its arguments handed back as it was
                            return out  # (x.to(x.dtype), x.contiguous()): it made nothing
                first, results = out, (out,)
            elif isinstance(out, _SEQUENCES):
                results = [item for item in out if isinstance(item, _Tensor)]
                first = results[0] if results else None
                if name == UNPACK_DUAL:  # in torch.func.jvp, whose wrappers no argument
                    state.wrapped = True  # showed: what it hands out is this op's
            else:
                first, results = None, ()
            if first is None:
                if changed is not None:
                    first = changed[0][0]
                elif name == "backward" and inputs:
                    first = _BackwardFrom(inputs[0])  # an op: what it ran is its own cost
                elif name == SET_DATA:  # x.data = y: x's value is y's from now on
                    self.state.take_value(args[0], args[1],
                                          self._stack[-1] if self._stack else -1, t0)
                    return out
                else:  # a collective (which bumps no version), or not an op
                    changed, first = collective_call(self, func, name, args, kwargs)
                    if first is None:
                        return out  # returned no tensor and changed none: not an op
            current, ops, held = self._current, self._ops, self._held
            call = self._stack[-1] if self._stack else -1
            refs = []
            position = 0
            for tensor in inputs:
                entry = current.get(id(tensor))
                if entry is not None and entry[ENTRY_VERSION] == versions[position] and \
                        entry[ENTRY_TENSOR]() is tensor:
                    refs.append(entry[ENTRY_REF])
                else:
                    try:  # unknown() at once for the usual unknown: a parameter's first use
                        refs.append(self._producer(tensor, versions[position], call, t0, entry)
                                    if entry is not None else self.state.unknown(
                                        tensor, versions[position], call, t0, "constant",
                                        held is not None))
                    except Uninitialized:  # a lazy module materializing its parameters
                        return out
                position += 1
            index = len(ops)
            if changed is not None:
                for tensor, version in changed:
                    self.state.values.changed(tensor, version, index)
            for tensor in results:
                if changed is not None:  # a result may be an argument it wrote, noted so
                    entry = current.get(id(tensor))
                    if entry is not None and entry[ENTRY_REF] == index and \
                            entry[ENTRY_TENSOR]() is tensor:
                        continue
                try:
                    version = read(tensor)
                except RuntimeError:  # an inference tensor
                    read = self._values.read_safely()
                    version = read(tensor)
                if held is not None:  # the ATen level
                    held.append(tensor)
                    source = view_source(func)
                    if source is not None and source < len(args):
                        version = version_of(args[source])
                current[id(tensor)] = (_ref(tensor), version, index, None)
            if state.wrapped:  # inside a torch.func transform: what its results wrap
                state.note_unwrapped(results, index)
            chains = self._chains  # see ChainGuard: its first test inline (it nearly always holds)
            if made:
                readable = number + made <= chains.admitted_below or \
                    chains.admit(refs, number, made, ops)
            else:
                readable = not chains.too_deep
            grad_fn = None
            if readable:
                try:  # values.grad_fn_of, inline: this runs for every op
                    grad_fn = first.grad_fn
                except RuntimeError:  # a view made under no_grad, its base since written
                    pass
            try:
                shape = first.shape
            except RuntimeError:  # a nested tensor
                shape = read_shape(first)
            seq = events.seq + 1
            events.seq = seq + len(refs)
            # a RawOp: its fields in their order (events.OP_*)
            ops.append((name, call, seq, t0, t1, refs, plain, plain_kwargs, shape,
                        first.dtype, None if grad_fn is None else type(grad_fn).__name__, number,
                        t0 if seq_before == seq - 1 else t1, func))
            if name in _ALIASES and first is out:  # x.data, x.detach(): a new tensor on x's
                self._values.note_alias(name, out, args[0])  # memory, no view of it
            return out
        except Exception as exc:  # a recorder bug must never break the user's forward
            self._known = _NO_OPS  # from now on every call passes through
            self.on_failure(exc)
            return out
        finally:
            if guard is not None:
                guard.__exit__(None, None, None)
            # the handler's lists go now, on its clock, not as its frame is torn down after
            inputs = plain = versions = refs = results = changed = None  # noqa: F841
            clock.spent += _now() - returned + half

    def release(self) -> None:
        """Let go of the results held (see ``hold_results``)."""
        if self._held:
            self._held.clear()

    def _producer(self, tensor: torch.Tensor, version: int, call: int, t: int,
                  entry: Any) -> Any:
        """What produced ``tensor`` at ``version``, where its entry does not say at once:
        a change through a view, a param, a constant."""
        values = self.state.values
        if entry is not None and entry[ENTRY_TENSOR]() is tensor:
            written = values.written(tensor, version, entry)
            if written is not None:
                return written[ENTRY_REF]
        return self.state.unknown(tensor, version, call, t, "constant", self._held is not None)


class OpMode(OpRecorder, TorchFunctionMode):
    """Records every torch-level call the forward makes as an op.

    PyTorch pops the mode while its handler runs, so calls made inside an op's
    implementation belong to that op; the user's own modes further down the stack still see
    every call. Where such modes exist, the handler's own reads of tensor metadata run with
    torch functions disabled, so they never see them. Pushed when a recorded forward starts
    and popped when it ends (:meth:`push`, :meth:`pop`).
    """

    __torch_function__ = OpRecorder.record

    def __init__(self, state: CaptureState,
                 on_failure: Callable[[BaseException], Any] = lambda exc: None) -> None:
        super().__init__(state, op_name_of, dispatch_half(state.clock.costs), on_failure)
        self.pushed = False

    def push(self) -> None:
        """Start recording ops (at the start of a recorded forward)."""
        if not self.pushed:
            # modes below this one would see the handler's own metadata reads
            outer = function_mode_depth() > 0
            self._guard = DisableTorchFunction() if outer else None
            self.__enter__()
            self.pushed = True

    def pop(self) -> None:
        """Stop recording ops, leaving any mode pushed after this one in place."""
        if not self.pushed:
            return
        leave_stack(self, function_modes, pop_function_mode, push_function_mode)
        self.pushed = False  # only once off: where that fails, recording's end tries again
