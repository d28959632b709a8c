"""What each op cost: FLOPs by PyTorch's own formulas, and the bytes autograd saved for the backward."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from torch.nn import functional as F
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode

from torchgraphrec.capture.opnames import op_name_of

__all__ = ["DISPATCH", "EXTRA_FORMULAS", "FLOP_FREE", "FREE", "FlopMode", "SavedBytes",
           "count_flops", "formula_of", "shortcuts_hold", "torch_level_counting"]

aten = torch.ops.aten
Formula = Callable[[tuple, dict, Any], int]


def _sequences(tensor: torch.Tensor) -> list[tuple[int, int]]:
    """``(batch, length)`` of each block of rows: one for a dense ``batch × length × ...``
    tensor, one per sequence for a nested one (which runs on its real tokens only)."""
    if tensor.is_nested:
        return [(1, int(size[0])) for size in tensor._nested_tensor_size().tolist()]
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
EXTRA_FORMULAS: dict[Any, Formula] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
    aten._native_multi_head_attention: _native_attention,
    aten._transformer_encoder_layer_fwd: _encoder_layer,
}


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


#: How :func:`torch_level_counting` says an op runs: without the FLOP mode (it counts
#: nothing), or under it (the ATen ops it runs are counted as they run).
FREE, DISPATCH = object(), object()

#: Torch-level calls (as :func:`~torchgraphrec.capture.opnames.op_name_of` names them, an
#: in-place ``_`` dropped) that PyTorch's FLOP counter counts as 0 on plain tensors: what
#: they run (elementwise, normalization, pooling, reductions, views, copies, factories) has
#: no FLOP formula. Only PyTorch's own functions and Tensor methods of these names.
FLOP_FREE = frozenset({
    # arithmetic, comparisons, activations
    "add", "sub", "mul", "div", "neg", "pow", "sqrt", "rsqrt", "exp", "log", "abs", "sign",
    "floor_divide", "remainder", "fmod", "clamp", "clip", "reciprocal", "erf", "tanh",
    "sigmoid", "sin", "cos", "maximum", "minimum", "lerp", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "and", "or", "xor", "isnan", "isinf", "where", "masked_fill", "relu",
    "relu6", "gelu", "silu", "mish", "hardswish", "hardsigmoid", "hardtanh", "leaky_relu",
    "elu", "selu", "celu", "softplus", "logsigmoid", "threshold", "glu", "softmax",
    "log_softmax", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    # normalization and pooling
    "layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm", "max_pool1d",
    "max_pool2d", "max_pool3d", "_max_pool1d", "_max_pool2d", "_max_pool3d", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    # reductions and selection
    "sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "std", "var",
    "cumsum", "cumprod", "logsumexp", "all", "any", "topk", "sort", "argsort",
    # views, indexing, copies, conversions and factories
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "contiguous",
    "flatten", "unflatten", "squeeze", "unsqueeze", "expand", "expand_as", "repeat",
    "repeat_interleave", "split", "chunk", "unbind", "narrow", "select", "getitem",
    "setitem", "cat", "concat", "concatenate", "stack", "flip", "roll", "movedim",
    "index_select", "gather", "scatter", "scatter_add", "masked_select", "tril", "triu",
    "to", "type_as", "float", "half", "double", "long", "int", "bool", "clone", "copy",
    "detach", "zero", "fill", "embedding", "pad", "one_hot", "new_zeros", "new_ones",
    "new_full", "new_empty", "new_tensor", "zeros", "ones", "full", "empty", "arange",
    "zeros_like", "ones_like", "full_like", "empty_like", "rand", "randn", "randint",
    "rand_like", "randn_like", "tensor", "as_tensor", "linspace",
})


#: Where PyTorch's own torch-level functions live (not ``torch.ops``: a custom op may be
#: called anything).
_TORCH_MODULES = frozenset({"torch", "torch.functional", "torch.nn.functional", "torch._tensor"})


def _torch_own(func: Any) -> bool:
    """Whether ``func`` is PyTorch's own function or Tensor method (not a library's
    function or a custom op that happens to take part in torch-function dispatch)."""
    owner = getattr(func, "__objclass__", None)
    if owner is torch._C.TensorBase or owner is torch.Tensor:
        return True
    module = getattr(func, "__module__", None) or ""
    return module in _TORCH_MODULES or module.startswith("torch._C.")


def _on_shapes(packet: Any) -> Callable[..., int]:
    """PyTorch's FLOP formula for the ATen op ``packet``, taking shapes and ``out_shape``
    (the registry's entry converts tensors to shapes with a tree map, which costs more than
    some kernels; it is used where the formula under it is not at hand)."""
    formula = flop_counter.flop_registry[packet]
    raw = getattr(formula, "__wrapped__", None)
    if raw is not None:
        return raw
    return lambda *shapes, out_shape=None, **kwargs: formula(*shapes, out_val=out_shape,
                                                            **kwargs)


def _linear(args: tuple, kwargs: dict, out: Any) -> int:
    # aten.linear runs one addmm, mm or matmul whose FLOPs are those of this mm; by a
    # vector (a 1-D weight) it is an mv or a dot, which PyTorch's counter does not count
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    if weight.dim() != 2:
        return 0
    inner, outer = weight.shape[1], weight.shape[0]
    rows = math.prod(args[0].shape[:-1])
    return int(_on_shapes(aten.mm)((rows, inner), (inner, outer), out_shape=None))


def _convolution(transposed: bool) -> Formula:
    def count(args: tuple, kwargs: dict, out: Any) -> int:
        weight = args[1] if len(args) > 1 else kwargs["weight"]
        input_shape, out_shape = tuple(args[0].shape), tuple(out.shape)
        if len(input_shape) == weight.dim() - 1:  # unbatched: run as a batch of one
            input_shape, out_shape = (1, *input_shape), (1, *out_shape)
        return int(_on_shapes(aten.convolution)(input_shape, tuple(weight.shape), None, None,
                                                None, None, transposed, out_shape=out_shape))
    return count


def _argument(args: tuple, kwargs: dict, position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs[name]


def _matmul(product: Any, first: int, names: tuple[str, str]) -> Formula:
    """The formula of a product of two matrix arguments, at ``first`` and the next position
    (or named ``names``), which is that of ``product`` (PyTorch's ``addmm`` and ``baddbmm``
    formulas are those of ``mm`` and ``bmm`` of their matrices)."""
    def count(args: tuple, kwargs: dict, out: Any) -> int:
        left = _argument(args, kwargs, first, names[0])
        right = _argument(args, kwargs, first + 1, names[1])
        return int(_on_shapes(product)(left.shape, right.shape, out_shape=None))
    return count


def _direct_formulas() -> dict[Any, Formula]:
    """Torch-level calls whose FLOPs follow from their arguments and result with PyTorch's
    formulas, counted as PyTorch's counter counts the ATen ops they run."""
    found: dict[Any, Formula] = {F.linear: _linear}
    for function in (F.conv1d, F.conv2d, F.conv3d):
        found[function] = _convolution(False)
    for function in (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d):
        found[function] = _convolution(True)
    for name, product, first, names in (
            ("mm", aten.mm, 0, ("input", "mat2")), ("addmm", aten.mm, 1, ("mat1", "mat2")),
            ("bmm", aten.bmm, 0, ("input", "mat2")),
            ("baddbmm", aten.bmm, 1, ("batch1", "batch2"))):
        found[getattr(torch, name)] = found[getattr(torch.Tensor, name)] = \
            _matmul(product, first, names)
    return found


#: The ATen ops PyTorch's counter has formulas for, by name: products, convolutions and
#: attentions (and the fused transformer layer of :data:`EXTRA_FORMULAS`).
_COUNTED_NAMES = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm",
                            "_transformer_encoder_layer_fwd"})


def _counted_family(op: Any) -> bool:
    name = getattr(op, "__name__", None) or str(op).rpartition(".")[2]
    return name in _COUNTED_NAMES or "conv" in name or "attention" in name


def shortcuts_hold() -> bool:
    """Whether :func:`torch_level_counting`'s shortcuts hold: every ATen op with a FLOP
    formula (PyTorch's and :data:`EXTRA_FORMULAS`) is a product, a convolution, an
    attention or the fused transformer layer, as in PyTorch; not where someone registered
    formulas for others (then every op runs under the FLOP mode).

    >>> shortcuts_hold()
    True
    """
    return all(_counted_family(op) for op in [*flop_counter.flop_registry, *EXTRA_FORMULAS])


def torch_level_counting(func: Any) -> Any:
    """How the FLOPs of the torch-level call ``func`` are counted, on plain tensors:
    :data:`FREE` (it has none), a formula of its arguments and result, or :data:`DISPATCH`
    (the ATen ops it runs are counted under the FLOP mode). Only valid where
    :func:`shortcuts_hold`.

    >>> torch_level_counting(torch.Tensor.add) is FREE
    True
    >>> torch_level_counting(torch.matmul) is DISPATCH
    True
    >>> weight = torch.ones(4, 3)
    >>> torch_level_counting(F.linear)((torch.ones(2, 3), weight), {}, None)
    48
    """
    formula = _DIRECT.get(func)
    if formula is not None:
        return formula
    if getattr(func, "__name__", "") == "backward":  # a backward run inside the forward
        return DISPATCH
    name = op_name_of(func)
    if name == "":  # reads metadata
        return FREE
    if name.rstrip("_") in FLOP_FREE and _torch_own(func):
        return FREE
    return DISPATCH


#: What FlopCounterMode leaves to the next mode (NJT's sizes and strides).
_METADATA = {aten.sym_is_contiguous.default, aten.is_contiguous.default,
             aten.is_contiguous.memory_format, aten.is_strides_like_format.default,
             aten.is_non_overlapping_and_dense.default, aten.size.default,
             aten.sym_size.default, aten.stride.default, aten.sym_stride.default,
             aten.storage_offset.default, aten.sym_storage_offset.default,
             aten.numel.default, aten.sym_numel.default, aten.dim.default,
             torch.ops.prim.layout.default}


def _decomposable(func: Any) -> bool:
    """Whether ``func.decompose`` can do anything (as ``OpOverload.decompose`` decides)."""
    if func is torch.ops.prim.device.default:
        return False
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    return key in getattr(func, "py_kernels", {}) or \
        torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)


class FlopMode(TorchDispatchMode):
    """Counts the FLOPs of every ATen call below the recorded ops, as
    ``torch.utils.flop_counter.FlopCounterMode`` counts them (an op without a formula is
    decomposed where it can be, as it does), into ``add(count)``: the recorder attributes
    them to the op running (or, in a backward, the op whose autograd node runs). Calls made
    with torch functions disabled altogether (the recorder's own work, probe statistics) are
    not the model's and are not counted."""

    def __init__(self, add: Callable[[int], None]) -> None:
        super().__init__()
        self.add = add
        self._plans: dict[Any, Any] = {}  # ATen op -> _PASS or (decomposable, formula)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        plan = self._plans.get(func)
        if plan is None:
            plan = self._plans[func] = _plan(func)
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
        if formula is not None and not _all_disabled():
            count = formula(args, kwargs, out)
            if count:
                self.add(count)
        return out


#: Whether torch functions are off altogether, as for the recorder's own work (a subclass's
#: default ``__torch_function__`` turns off only subclass handling, and its ops count).
_all_disabled: Callable[[], bool] = getattr(
    torch._C, "_is_torch_function_all_disabled", lambda: not torch._C._is_torch_function_enabled())

#: The plan of an op FlopMode leaves to the next mode.
_PASS = object()


def _plan(func: Any) -> Any:
    """What :class:`FlopMode` does with ``func``, worked out once per op."""
    if func in _METADATA or isinstance(func, torch._ops.HigherOrderOperator):
        return _PASS
    return _decomposable(func), formula_of(func)


_dispatch_modes: Callable[[], int] = torch._C._len_torch_dispatch_stack
_PYTHON_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | \
    torch._C.DispatchKeySet(torch._C.DispatchKey.PythonTLSSnapshot)


class SavedBytes:
    """Saved-tensor hooks that count the bytes autograd saves for the backward while each
    op of ``ops`` runs (into :attr:`by_op`), each storage once at its full size, leaving
    out the storages :meth:`push` and :meth:`exclude` are given (parameters, the model's
    inputs). The tensor is handed on unchanged: to the pair of hooks that was active before
    (only the innermost pair runs, so the user's own offloading hooks keep working and see
    every tensor), or kept as autograd would.
    """

    def __init__(self, ops: list) -> None:
        self._ops = ops  # the ops recorded so far: the one running is the next
        self.by_op: dict[int, int] = {}  # op index -> bytes saved while it ran
        self.done: set[int] = set()  # storages counted already, or never to count
        self._outer: Any = None
        self.active = False

    def push(self, excluded: set[int]) -> bool:
        """Start counting, leaving out the storages ``excluded`` (which it keeps and adds
        to); ``False`` where PyTorch forbids saved-tensor hooks here."""
        self._outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
        try:
            torch._C._autograd._push_saved_tensors_default_hooks(self._pack, self._unpack)
        except RuntimeError:  # under torch.autograd.graph.disable_saved_tensors_hooks
            return False
        self.done = excluded
        self.active = True
        return True

    def exclude(self, tensor: torch.Tensor) -> None:
        """Leave ``tensor``'s storage out (a model input, say)."""
        self.done.add(tensor.untyped_storage()._cdata)

    def pop(self) -> None:
        """Stop counting."""
        if self.active:
            self.active = False
            torch._C._autograd._pop_saved_tensors_default_hooks()
        self.done = set()

    def _pack(self, tensor: torch.Tensor) -> Any:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in self.done:
            self.done.add(key)
            index = len(self._ops)
            self.by_op[index] = self.by_op.get(index, 0) + storage.nbytes()
        if self._outer is not None:
            return self._outer[0](tensor)
        if tensor.is_leaf:  # no autograd node of its own: holding it makes no cycle
            return tensor
        # holding an op's result itself would make a reference cycle through its node; the
        # detach is the recorder's own, which no dispatch mode (its own FLOP mode, a
        # user's) should see, and hiding it from them costs more than the detach
        if _dispatch_modes():
            with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEYS):
                return tensor.detach()
        return tensor.detach()

    def _unpack(self, packed: Any) -> torch.Tensor:
        if self._outer is not None:
            return self._outer[1](packed)
        return packed


_DIRECT = _direct_formulas()
