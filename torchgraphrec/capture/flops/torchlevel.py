"""Where a torch-level call's FLOPs come from without a dispatch mode: none, or a formula of its arguments."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch.nn import functional as F
from torch.utils import flop_counter

from torchgraphrec._torch import TensorBase
from torchgraphrec.capture.flops.formulas import EXTRA_FORMULAS, Formula
from torchgraphrec.capture.opnames import op_name_of

__all__ = ["DISPATCH", "FLOP_FREE", "FREE", "shortcuts_hold", "torch_level_counting"]

aten = torch.ops.aten


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
    if owner is TensorBase or owner is torch.Tensor:
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


def _argument(args: tuple, kwargs: dict, position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs[name]


def _linear(args: tuple, kwargs: dict, out: Any) -> int:
    # aten.linear runs one addmm, mm or matmul whose FLOPs are those of this mm; by a
    # vector (a 1-D weight) it is an mv or a dot, which PyTorch's counter does not count
    weight = _argument(args, kwargs, 1, "weight")
    if weight.dim() != 2:
        return 0
    inner, outer = weight.shape[1], weight.shape[0]
    rows = math.prod(args[0].shape[:-1])
    return int(_on_shapes(aten.mm)((rows, inner), (inner, outer), out_shape=None))


def _convolution(transposed: bool) -> Formula:
    def count(args: tuple, kwargs: dict, out: Any) -> int:
        weight = _argument(args, kwargs, 1, "weight")
        input_shape, out_shape = tuple(args[0].shape), tuple(out.shape)
        if len(input_shape) == weight.dim() - 1:  # unbatched: run as a batch of one
            input_shape, out_shape = (1, *input_shape), (1, *out_shape)
        return int(_on_shapes(aten.convolution)(input_shape, tuple(weight.shape), None, None,
                                                None, None, transposed, out_shape=out_shape))
    return count


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
#: attentions (and the fused transformer layer and the grouped matmul of
#: :data:`EXTRA_FORMULAS`).
_COUNTED_NAMES = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_grouped_mm",
                            "_scaled_grouped_mm", "_transformer_encoder_layer_fwd",
                            "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"})


def _counted_family(op: Any) -> bool:
    name = getattr(op, "__name__", None) or str(op).rpartition(".")[2]
    return name in _COUNTED_NAMES or "conv" in name or "attention" in name


def shortcuts_hold() -> bool:
    """Whether :func:`torch_level_counting`'s shortcuts hold: every ATen op with a FLOP
    formula (PyTorch's and :data:`EXTRA_FORMULAS`) is a product, a convolution, an
    attention, the fused transformer layer or a fused recurrent layer (none of which a
    :data:`FLOP_FREE` call runs), as in PyTorch; not where someone registered
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


_DIRECT = _direct_formulas()
