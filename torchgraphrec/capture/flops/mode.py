"""The dispatch mode that counts the FLOPs of every ATen call below the recorded ops."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from torchgraphrec._torch import DisableTorchFunction, HigherOrderOperator, TorchDispatchMode, \
    aten_overloads, disable_dispatch_modes, dtensor_local, dtensor_type, \
    has_composite_implicit_kernel, in_sharding_propagation, pop_dispatch_mode, \
    push_dispatch_mode, torch_function_all_disabled
from torchgraphrec.capture.calibrate import dispatch_mode_cost
from torchgraphrec.capture.clock import Clock
from torchgraphrec.capture.flops.formulas import formula_of, formulas_version

__all__ = ["FlopMode", "local_shards"]

_now: Callable[[], int] = time.perf_counter_ns

#: What FlopCounterMode leaves to the next mode (NJT's sizes and strides).
_METADATA = aten_overloads([
    "sym_is_contiguous.default", "is_contiguous.default", "is_contiguous.memory_format",
    "is_strides_like_format.default", "is_non_overlapping_and_dense.default", "size.default",
    "sym_size.default", "stride.default", "sym_stride.default", "storage_offset.default",
    "sym_storage_offset.default", "numel.default", "sym_numel.default", "dim.default",
]) | aten_overloads(["layout.default"], namespace="prim")


class FlopMode(TorchDispatchMode):
    """Counts the FLOPs of every ATen call below the recorded ops, as
    ``torch.utils.flop_counter.FlopCounterMode`` counts them (an op with a decomposition is
    counted as its decomposition, as it does), into ``add(count)``: the recorder attributes
    them to the op running (or, in a backward, the op whose autograd node runs). Calls made
    with torch functions disabled altogether (the recorder's own work, probe statistics) are
    not the model's and are not counted. Its own work stops the recording's ``clock``.

    Unlike ``FlopCounterMode``, it never lets a decomposition compute the result: an op
    that reaches a dispatch mode undecomposed has a kernel of its own (``silu_backward``,
    ``native_batch_norm``, ``gru``), whose rounding the decomposition need not share, and
    the model's outputs and gradients must be bit-identical to a plain run's. The
    decomposition runs on meta tensors of the arguments' shapes to be counted, and the
    op's own kernel runs for the result."""

    def __init__(self, add: Callable[[int], None], clock: Clock,
                 on_failure: Callable[[BaseException], Any]) -> None:
        super().__init__()
        self.add, self.on_failure = add, on_failure
        self.clock = clock
        self.cost = dispatch_mode_cost()  # of reaching this handler and back
        self._plans: dict[Any, Any] = {}  # ATen op -> _PASS or (decomposable, formula)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        entered, clock = _now(), self.clock
        kwargs = kwargs or {}
        plan = self._plans.get(func)
        if plan is None:
            plan = self._plans[func] = _plan(func)
        clock.spent += _now() - entered + self.cost
        if plan is _PASS:
            return NotImplemented
        if types and in_sharding_propagation():  # DTensor's fake run to learn a shape
            return func(*args, **kwargs)
        decomposable, formula = plan
        if decomposable:
            started = _now()
            key = _call_key(func, args, kwargs)
            clock.spent += _now() - started
            if _COUNTS_NOTHING.get(key) != formulas_version() and \
                    self._count_decomposition(func, args, kwargs, key):
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        returned = _now()
        try:
            if formula is not None and not _all_disabled():
                # what this rank computes: a DTensor's local shards
                count = formula(_local(args), _local(kwargs), _local(out)) \
                    if types_sharded(types) else formula(args, kwargs, out)
                if count:
                    self.add(count)
        except Exception as exc:  # a formula's failure must never break the user's forward
            self.on_failure(exc)
        finally:
            clock.spent += _now() - returned
        return out

    def _count_decomposition(self, func: Any, args: tuple, kwargs: dict, key: Any) -> bool:
        """Count ``func``'s decomposition on meta tensors; whether it has one that ran
        (where meta tensors cannot run it, the op is counted by its formula, if any). The
        user's modes see none of it, and it is the recorder's own time. A call that
        counts nothing is remembered by its ``key`` (:func:`_call_key`)."""
        clock, add = self.clock, self.add
        started, spent = _now(), clock.spent
        counted = [0]
        self.add = counted.append
        try:
            with disable_dispatch_modes():
                with DisableTorchFunction():
                    meta_args, meta_kwargs = _each_tensor(args, _on_meta), \
                        _each_tensor(kwargs, _on_meta)
                # pushed, not entered again: torch 2.4 keeps one old value of its flags per
                # mode, which entering it inside its own handler would overwrite for good
                push_dispatch_mode(self)
                try:
                    if func.decompose(*meta_args, **meta_kwargs) is NotImplemented:
                        return False
                finally:
                    pop_dispatch_mode()
        except Exception:  # noqa: BLE001 - a decomposition meta tensors cannot run
            return False
        finally:  # the handlers it ran added their own time: the whole of it, once
            self.add = add
            clock.spent = spent + _now() - started
        total = sum(counted)
        if total:
            add(total)
        elif key is not None and _all_sized((args, kwargs)):  # a batch norm's, a SiLU
            _COUNTS_NOTHING[key] = formulas_version()  # gradient's: elementwise
        return True


#: Whether torch functions are off altogether, as for the recorder's own work (a subclass's
#: default ``__torch_function__`` turns off only subclass handling, and its ops count).
_all_disabled: Callable[[], bool] = torch_function_all_disabled

def types_sharded(types: Any) -> bool:
    """Whether a dispatch call's tensor ``types`` include ``DTensor`` (tensor parallel,
    FSDP2's sharded parameters), whose shapes are global."""
    found = dtensor_type()
    return found is not None and any(issubclass(kind, found) for kind in types)


def _each_tensor(value: Any, change: Callable[[Any], Any]) -> Any:
    """``value`` with ``change`` applied to each item in it (at the top, or in a tuple,
    list or dict) that is not a tuple, list or dict."""
    if isinstance(value, (tuple, list)):
        return type(value)(_each_tensor(item, change) for item in value)
    if isinstance(value, dict):
        return {key: _each_tensor(item, change) for key, item in value.items()}
    return change(value)


def _local(value: Any) -> Any:
    """``value`` with each ``DTensor`` in it (at the top, or in a tuple, list or dict)
    replaced by its local shard."""
    return _each_tensor(value, dtensor_local)


def _on_meta(value: Any) -> Any:
    """A tensor as an empty one on the meta device, of the shape, strides and dtype this
    rank computes with (a ``DTensor``'s local shard's); any other value as it is.

    >>> _on_meta(torch.ones(2, 3).t())
    tensor(..., device='meta', size=(3, 2))
    """
    if not isinstance(value, torch.Tensor):
        return value
    local = dtensor_local(value)
    return torch.empty_strided(local.shape, local.stride(), dtype=local.dtype, device="meta")


def local_shards(args: tuple, kwargs: dict, out: Any) -> tuple[tuple, dict, Any]:
    """A torch-level call's arguments and result as this rank computes them: each
    ``DTensor`` among them replaced by its local shard (the same objects where there is
    none)."""
    found = dtensor_type()
    if found is None or not any(isinstance(item, found) for item in (*args, out)):
        return args, kwargs, out
    return _local(args), _local(kwargs), _local(out)


#: The plan of an op FlopMode leaves to the next mode.
_PASS = object()

#: Calls (:func:`_call_key`) whose decompositions counted no FLOPs (elementwise ones: a
#: batch norm, a SiLU gradient), by the version of the formulas they were counted with:
#: running one on meta tensors costs about a millisecond, which a ResNet's every batch norm
#: should not pay. By call, not by op: whether a composite op's decomposition counts
#: anything may depend on its shapes and settings (a matrix-vector ``matmul`` runs ``mv``,
#: which counts nothing; an ``einsum`` over a dimension of size 1 multiplies elementwise).
_COUNTS_NOTHING: dict[Any, int] = {}
_COUNTS_NOTHING_LIMIT = 4096


def _call_key(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` with what its decomposition's count can depend on: its arguments with each
    tensor as its shape; ``None`` where one is not hashable.

    >>> key = _call_key(torch.ops.aten.matmul.default, (torch.ones(2, 3), torch.ones(3)), {})
    >>> key == _call_key(torch.ops.aten.matmul.default, (torch.zeros(2, 3), torch.ones(3)), {})
    True
    >>> key == _call_key(torch.ops.aten.matmul.default, (torch.ones(2, 3), torch.ones(3, 1)), {})
    False
    """
    if len(_COUNTS_NOTHING) >= _COUNTS_NOTHING_LIMIT:  # a model of ever new shapes
        _COUNTS_NOTHING.clear()
    try:
        key = (func, _frozen(args), _frozen(kwargs))
        hash(key)
    except (TypeError, RuntimeError):  # an unhashable setting, a strided nested tensor's
        return None  # shape (which it cannot give)
    return key


def _frozen(value: Any) -> Any:
    """``value`` with each tensor in it as its shape (a ``DTensor``'s local shard's) and
    each list and dict as a tuple."""
    if isinstance(value, torch.Tensor):
        return _SHAPE, tuple(dtensor_local(value).shape)
    if isinstance(value, (tuple, list)):
        return tuple(map(_frozen, value))
    if isinstance(value, dict):
        return tuple((name, _frozen(item)) for name, item in value.items())
    return value


_SHAPE = object()  # marks a tensor's shape among the values of a call's key


def _all_sized(values: Any) -> bool:
    """Whether every tensor in ``values`` (nested in tuples, lists and dicts) has elements:
    an empty one may make a decomposition skip what it counts for others."""
    if isinstance(values, (tuple, list)):
        return all(_all_sized(item) for item in values)
    if isinstance(values, dict):
        return all(_all_sized(item) for item in values.values())
    return not isinstance(values, torch.Tensor) or values.numel() > 0


def _plan(func: Any) -> Any:
    """What :class:`FlopMode` does with ``func``, worked out once per op."""
    if func in _METADATA or isinstance(func, HigherOrderOperator):
        return _PASS
    formula = formula_of(func)
    if formula is not None:  # as FlopCounterMode: a formula before a decomposition
        return False, formula
    return has_composite_implicit_kernel(func), None
