"""The torch-function mode that records every torch-level call a forward makes as an op."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from torchgraphrec.capture.autograd import MAX_CHAIN
from torchgraphrec.capture.opnames import mutates_by_name, op_name_of, strip_tensors
from torchgraphrec.capture.state import CaptureState, Uninitialized, read_shape

__all__ = ["OpMode"]

_Tensor = torch.Tensor
_SEQUENCES = (list, tuple)
_now = time.perf_counter_ns
_autograd_number: Callable[[], int] = torch.autograd._get_sequence_nr  # type: ignore[attr-defined]


def _tensors_in(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensor arguments, also inside lists and tuples (``torch.cat([a, b])``)."""
    found = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, _Tensor):
            found.append(value)
        elif type(value) in _SEQUENCES:
            found += [item for item in value if isinstance(item, _Tensor)]
    return found


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return -1


class OpMode(TorchFunctionMode):
    """Notes one op per call that returns a tensor or changes one in place.

    PyTorch pops the mode while its handler runs, so calls made inside an op's
    implementation belong to that op; the user's own modes further down the stack still see
    every call. The handler's own reads of tensor metadata run with torch functions
    disabled, so those modes never see them. Pushed when a recorded forward starts and popped
    when it ends (:meth:`push`, :meth:`pop`).
    """

    def __init__(self, state: CaptureState) -> None:
        super().__init__()
        self.state = state
        self._names: dict[Any, str] = {}
        self._quiet = torch._C.DisableTorchFunction()
        self.pushed = False

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = op_name_of(func)
        if not name:
            return func(*args, **kwargs)
        quiet, state = self._quiet, self.state
        quiet.__enter__()
        try:
            t0, number = _now(), _autograd_number()
            inputs = _tensors_in(args, kwargs)
            versions = [_version(tensor) for tensor in inputs]
            seq = state.events.seq
        finally:
            quiet.__exit__(None, None, None)
        out = func(*args, **kwargs)
        quiet.__enter__()
        try:
            self._note(name, args, kwargs, out, inputs, versions, t0, number, seq)
        finally:
            quiet.__exit__(None, None, None)
        return out

    def _note(self, name: str, args: tuple, kwargs: dict, out: Any, inputs: list,
              versions: list[int], t0: int, number: int, seq_before: int) -> None:
        t1, made = _now(), _autograd_number() - number
        changed = [(tensor, now) for tensor, before in zip(inputs, versions)
                   if (now := _version(tensor)) != before]
        if not changed and versions and versions[0] < 0:  # inference tensors: by name
            target = mutates_by_name(name, args, kwargs)
            changed = [(target, -1)] if target is not None else []
        results = [out] if isinstance(out, _Tensor) else (
            [item for item in out if isinstance(item, _Tensor)]
            if isinstance(out, _SEQUENCES) else [])
        if not results and not changed:
            return  # returned no tensor and changed none: not an op
        state = self.state
        events, values = state.events, state.values
        # a call observed inside the op (rare) came after its start: keep t_ns monotonic
        t_edges = t0 if events.seq == seq_before else t1
        call = state.stack[-1] if state.stack else -1
        try:
            refs = [self._producer(tensor, version, call, t0)
                    for tensor, version in zip(inputs, versions)]
        except Uninitialized:  # a lazy module materializing its parameters
            return
        index = len(events.ops)
        for tensor, version in changed:
            values.changed(tensor, version, index)
        first = results[0] if results else changed[0][0]
        for tensor in results:
            entry = values.current.get(id(tensor))
            if entry is None or entry[2] != index or entry[0]() is not tensor:
                values.set(tensor, _version(tensor), index, None)
        # a result may be an older node (an alias of an input): the producers' depth counts
        depth = made + max([state.depth_of(ref) for ref in refs], default=0) \
            if made or state.deepest else 0
        state.op_depths.append(depth)
        if depth > state.deepest:
            state.deepest = depth
            state.too_deep = depth > MAX_CHAIN
        grad_fn = None if state.too_deep else first.grad_fn  # see MAX_CHAIN
        seq = events.seq + 1
        events.seq = seq + len(refs)
        events.ops.append((name, call, seq, t0, t1, refs, *strip_tensors(args, kwargs), read_shape(first),
                           first.dtype, type(grad_fn).__name__ if grad_fn is not None else None,
                           number, t_edges))

    def _producer(self, tensor: torch.Tensor, version: int, call: int, t: int) -> Any:
        """What produced ``tensor`` at ``version`` (its version when the op started)."""
        values = self.state.values
        entry = values.current.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            if entry[1] == version:
                return entry[2]
            written = values.written(tensor, version, entry)
            if written is not None:
                return written[2]
        return self.state.unknown(tensor, version, call, t, "constant")

    def push(self) -> None:
        """Start recording ops (at the start of a recorded forward)."""
        if not self.pushed:
            self.__enter__()
            self.pushed = True

    def pop(self) -> None:
        """Stop recording ops, leaving any mode pushed after this one in place."""
        if not self.pushed:
            return
        self.pushed = False
        from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode

        stack = _get_current_function_mode_stack()
        if self not in stack:
            return
        above = []
        while True:
            mode = _pop_mode()
            if mode is self:
                break
            above.append(mode)
        for mode in reversed(above):
            _push_mode(mode)
