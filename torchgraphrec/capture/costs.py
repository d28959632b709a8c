"""What each op cost: FLOPs by PyTorch's own formulas, and the bytes autograd saved for the backward."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch
from torch.utils import flop_counter

from torchgraphrec._torch import SAVED_TENSOR_HOOKS_READABLE, HigherOrderOperator, \
    TorchDispatchMode, aten_overloads, aten_packets, disable_dispatch_modes, \
    dispatch_mode_depth, exclude_python_dispatch, has_composite_implicit_kernel, \
    nested_sizes, pop_saved_tensor_hooks, push_saved_tensor_hooks, \
    saved_tensor_hooks_enabled, top_saved_tensor_hooks, torch_function_all_disabled
from torchgraphrec.capture.calibrate import dispatch_mode_cost
from torchgraphrec.capture.clock import Clock
from torchgraphrec.capture.storages import storages_of

__all__ = ["EXTRA_FORMULAS", "FlopMode", "Formula", "SavedBytes", "UNREADABLE_HOOKS",
           "count_flops", "formula_of"]

aten = torch.ops.aten
Formula = Callable[[tuple, dict, Any], int]
_now: Callable[[], int] = time.perf_counter_ns


def _sequences(tensor: torch.Tensor) -> list[tuple[int, int]]:
    """``(batch, length)`` of each block of rows: one for a dense ``batch × length × ...``
    tensor, one per sequence for a nested one (which runs on its real tokens only)."""
    if tensor.is_nested:
        return [(1, int(size[0])) for size in nested_sizes(tensor)]
    return [(int(tensor.shape[0]), int(tensor.shape[1]))]


def _attention_flops(query: torch.Tensor, key: torch.Tensor, embed: int, heads: int,
                     packed: bool) -> int:
    """A multi-head attention's matmuls as the unfused code runs them: the input
    projections (one packed linear for self-attention), the attention itself (PyTorch's SDPA
    formula) and the output projection."""
    total = 0
    for (batch, length), (_, other) in zip(_sequences(query), _sequences(key)):
        projections = 2 * batch * length * embed * 3 * embed if packed else \
            2 * batch * length * embed * embed + 2 * batch * other * embed * 2 * embed
        shape_q = (batch, heads, length, embed // heads)
        shape_k = (batch, heads, other, embed // heads)
        total += projections + flop_counter.sdpa_flop_count(shape_q, shape_k, shape_k)
        total += 2 * batch * length * embed * embed
    return total


def _native_attention(args: tuple, kwargs: dict, out: Any) -> int:
    query, key, value, embed, heads = args[:5]
    return _attention_flops(query, key, embed, heads, query is key and key is value)


def _encoder_layer(args: tuple, kwargs: dict, out: Any) -> int:
    src, embed, heads = args[:3]
    inner = args[14].shape[0]  # ffn_weight_1: inner × embed
    tokens = sum(batch * length for batch, length in _sequences(src))
    return _attention_flops(src, src, embed, heads, True) + 4 * tokens * embed * inner


def _cpu_attention(args: tuple, kwargs: dict, out: Any) -> int:
    query, key, value = args[:3]
    return flop_counter.sdpa_flop_count(query.shape, key.shape, value.shape)


def _cpu_attention_backward(args: tuple, kwargs: dict, out: Any) -> int:
    # as the math backend counts it: the gradients of its two matmuls, twice the forward
    # (torch's formula for the fused GPU kernels adds their recomputation of the scores)
    grad_out, query, key, value = args[:4]
    return 2 * flop_counter.sdpa_flop_count(query.shape, key.shape, value.shape)


#: Kernels ``torch.utils.flop_counter`` has no formula for, counted as what they fuse, so
#: that a model's FLOPs are the same whichever kernel ran: the CPU attention kernel (as
#: SDPA's math backend counts it) and the fused fast paths of ``nn.MultiheadAttention``
#: and ``nn.TransformerEncoderLayer`` (as their Python paths count).
_EXTRA_KERNELS: dict[str, Formula] = {
    "_scaled_dot_product_flash_attention_for_cpu": _cpu_attention,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _cpu_attention_backward,
    "_native_multi_head_attention": _native_attention,
    "_transformer_encoder_layer_fwd": _encoder_layer,
}
EXTRA_FORMULAS: dict[Any, Formula] = {  # a release without one of them lacks its entry
    packet: _EXTRA_KERNELS[name] for name, packet in aten_packets(_EXTRA_KERNELS).items()}


def formula_of(func: Any) -> Formula | None:
    """How to count the FLOPs of the ATen op ``func``: ``torch.utils.flop_counter``'s
    formula (those registered with ``register_flop_formula`` included), else
    :data:`EXTRA_FORMULAS`'s, else ``None``."""
    packet = func._overloadpacket
    formula = flop_counter.flop_registry.get(packet)
    if formula is not None:
        return lambda args, kwargs, out: int(formula(*args, **kwargs, out_val=out))
    extra = EXTRA_FORMULAS.get(packet)
    return None if extra is None else lambda args, kwargs, out: int(extra(args, kwargs, out))


def count_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    """The FLOPs of one ATen call (see :func:`formula_of`; 0 without a formula).

    >>> a, b = torch.ones(2, 3), torch.ones(3, 4)
    >>> count_flops(aten.mm.default, (a, b), {}, a @ b)
    48
    """
    formula = formula_of(func)
    return 0 if formula is None else formula(args, kwargs, out)


#: What FlopCounterMode leaves to the next mode (NJT's sizes and strides).
_METADATA = aten_overloads([
    "sym_is_contiguous.default", "is_contiguous.default", "is_contiguous.memory_format",
    "is_strides_like_format.default", "is_non_overlapping_and_dense.default", "size.default",
    "sym_size.default", "stride.default", "sym_stride.default", "storage_offset.default",
    "sym_storage_offset.default", "numel.default", "sym_numel.default", "dim.default",
]) | aten_overloads(["layout.default"], namespace="prim")


class FlopMode(TorchDispatchMode):
    """Counts the FLOPs of every ATen call below the recorded ops, as
    ``torch.utils.flop_counter.FlopCounterMode`` counts them (an op without a formula is
    decomposed where it can be, as it does), into ``add(count)``: the recorder attributes
    them to the op running (or, in a backward, the op whose autograd node runs). Calls made
    with torch functions disabled altogether (the recorder's own work, probe statistics) are
    not the model's and are not counted. Its own work stops the recording's ``clock``."""

    def __init__(self, add: Callable[[int], None], clock: Clock) -> None:
        super().__init__()
        self.add = add
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
        decomposable, formula = plan
        # entering the mode again costs more than most kernels: only where it decomposes
        if decomposable:
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        returned = _now()
        try:
            if formula is not None and not _all_disabled():
                count = formula(args, kwargs, out)
                if count:
                    self.add(count)
        finally:
            clock.spent += _now() - returned
        return out


#: Whether torch functions are off altogether, as for the recorder's own work (a subclass's
#: default ``__torch_function__`` turns off only subclass handling, and its ops count).
_all_disabled: Callable[[], bool] = torch_function_all_disabled

#: The plan of an op FlopMode leaves to the next mode.
_PASS = object()


def _plan(func: Any) -> Any:
    """What :class:`FlopMode` does with ``func``, worked out once per op."""
    if func in _METADATA or isinstance(func, HigherOrderOperator):
        return _PASS
    return has_composite_implicit_kernel(func), formula_of(func)


_dispatch_modes: Callable[[], int] = dispatch_mode_depth


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


class SavedBytes:
    """Saved-tensor hooks that count the bytes autograd saves for the backward while each
    op of ``ops`` runs (into :attr:`by_op`), each storage once at its full size, leaving
    out the storages :meth:`push` and :meth:`exclude` are given (parameters, the model's
    inputs). The tensor is handed on unchanged: to the pair of hooks that was active before
    (only the innermost pair runs, so the user's own offloading hooks keep working and see
    every tensor), or kept as autograd would.
    """

    def __init__(self, ops: list, clock: Clock) -> None:
        self._ops = ops  # the ops recorded so far: the one running is the next
        self._clock = clock  # stopped while the hooks work (inside the op's own time)
        self.by_op: dict[int, int] = {}  # op index -> bytes saved while it ran
        self.done: set[int] = set()  # storages counted already, or never to count
        self._outer: Any = None
        self.active = False

    def push(self, excluded: set[int]) -> Optional[str]:
        """Start counting, leaving out the storages ``excluded`` (which it keeps and adds
        to); where it cannot, why not."""
        if not saved_tensor_hooks_enabled():
            return ("saved-tensor hooks are disabled here "
                    "(torch.autograd.graph.disable_saved_tensors_hooks)")
        if not SAVED_TENSOR_HOOKS_READABLE:  # ours could silently take the place of a user's
            return UNREADABLE_HOOKS
        self._outer = top_saved_tensor_hooks()
        push_saved_tensor_hooks(self._pack, self._unpack)
        self.done = excluded
        self.active = True
        return None

    def exclude(self, tensor: torch.Tensor) -> None:
        """Leave ``tensor``'s storages out (a model input, say)."""
        self.done.update(storage._cdata for storage in storages_of(tensor))

    def pop(self) -> None:
        """Stop counting."""
        if self.active:
            self.active = False
            pop_saved_tensor_hooks()
        self.done = set()

    def _count(self, storage: Any) -> None:
        """Add ``storage``'s bytes to the op running, once."""
        key = storage._cdata
        if key not in self.done:
            self.done.add(key)
            index = len(self._ops)
            self.by_op[index] = self.by_op.get(index, 0) + storage.nbytes()

    def _pack(self, tensor: torch.Tensor) -> Any:
        entered = _now()
        try:
            storage = tensor.untyped_storage()
        except (NotImplementedError, RuntimeError):  # a sparse tensor: its indices and values
            for part in storages_of(tensor):
                self._count(part)
        else:  # inline, as _count: this runs for every tensor autograd saves
            key = storage._cdata
            if key not in self.done:
                self.done.add(key)
                index = len(self._ops)
                self.by_op[index] = self.by_op.get(index, 0) + storage.nbytes()
        clock = self._clock
        if self._outer is not None:  # the user's hooks: their work is the model's
            clock.spent += _now() - entered + clock.costs.pack
            return self._outer[0](tensor)
        packed = tensor if tensor.is_leaf else _detached(tensor)
        clock.spent += _now() - entered + clock.costs.pack
        return packed

    def _unpack(self, packed: Any) -> torch.Tensor:
        if self._outer is not None:
            return self._outer[1](packed)
        return packed


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
