"""How many FLOPs an ATen op runs: PyTorch's own formulas, and the fused kernels they lack."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils import flop_counter

from torchgraphrec._torch import aten_packets, nested_sizes

__all__ = ["EXTRA_FORMULAS", "Formula", "count_flops", "formula_of", "formulas_version"]

aten = torch.ops.aten
Formula = Callable[[tuple, dict, Any], int]


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


def _sdpa_flops(query: Any, key: Any, value: Any) -> int:
    """``sdpa_flop_count`` of these shapes, grouped-query attention's too: the kernel gives
    each query head its group's key and value, which counts as key and value of the query's
    head count (torch before 2.13 counts equal head counts only, and raises otherwise).

    >>> q, kv = torch.ones(1, 4, 8, 16), torch.ones(1, 2, 8, 16)
    >>> _sdpa_flops(q, kv, kv) == flop_counter.sdpa_flop_count(q.shape, q.shape, q.shape)
    True
    """
    heads = query.shape[-3]
    key_shape, value_shape = list(key.shape), list(value.shape)
    key_shape[-3] = value_shape[-3] = heads
    return flop_counter.sdpa_flop_count(query.shape, key_shape, value_shape)


def _cpu_attention(args: tuple, kwargs: dict, out: Any) -> int:
    query, key, value = args[:3]
    return _sdpa_flops(query, key, value)


def _cpu_attention_backward(args: tuple, kwargs: dict, out: Any) -> int:
    # the gradients of the math backend's two matmuls, twice the forward: all of query's,
    # key's and value's, which this kernel computes also where autograd needs only some
    # (torch's formula for the fused GPU kernels adds their recomputation of the scores)
    grad_out, query, key, value = args[:4]
    return 2 * _sdpa_flops(query, key, value)


def _grouped_mm(args: tuple, kwargs: dict, out: Any) -> int:
    """``torch._grouped_mm`` (a mixture of experts' experts in one call): its groups' matmuls,
    as ``bmm`` counts one. Groups split the rows (``2D @ 3D``), the columns (``3D @ 2D``) or
    the contraction (``2D @ 2D``) at offsets the shapes bound; counted to the shapes, as a
    formula reads no tensor's values.

    >>> tokens, experts = torch.ones(48, 32), torch.ones(4, 32, 64)
    >>> _grouped_mm((tokens, experts), {}, torch.ones(48, 64)) == 2 * 48 * 32 * 64
    True
    """
    first, second = args[:2]
    if first.dim() == 2 and second.dim() == 2:  # (M, K) @ (K, N) -> (groups, M, N)
        return 2 * first.shape[0] * first.shape[1] * second.shape[1]
    return 2 * out.numel() * first.shape[-1]


def _rnn_layer(args: tuple, kwargs: dict, out: Any) -> int:
    """oneDNN's recurrent layer (``nn.LSTM`` on the CPU): its matmuls, as the step-by-step
    path counts them, the input's and the hidden state's projections at every step (the
    weights' rows hold every gate).

    >>> steps = torch.ones(12, 3, 32)  # 12 steps of a batch of 3
    >>> w_ih, w_hh = torch.ones(4 * 48, 32), torch.ones(4 * 48, 48)
    >>> _rnn_layer((steps, w_ih, w_hh), {}, None) == 2 * 36 * (32 + 48) * 4 * 48
    True
    """
    steps, input_weight, hidden_weight = args[:3]
    rows = steps.numel() // steps.shape[-1]
    return 2 * rows * (input_weight.numel() + hidden_weight.numel())


def _rnn_layer_backward(args: tuple, kwargs: dict, out: Any) -> int:
    """The backward of :func:`_rnn_layer`: each projection's two gradients (its input's and
    its weight's), which the fused kernel computes whether or not they are needed."""
    return 2 * _rnn_layer(args, kwargs, out)


#: Kernels ``torch.utils.flop_counter`` has no formula for, counted as what they fuse, so
#: that a model's FLOPs are the same whichever kernel ran: the CPU attention kernel (as
#: SDPA's math backend counts it), the fused fast paths of ``nn.MultiheadAttention``
#: and ``nn.TransformerEncoderLayer`` (as their Python paths count), the grouped matmul of
#: mixture-of-experts layers (as their loops over experts count), and oneDNN's recurrent
#: layer (as ``nn.LSTM``'s step-by-step path counts).
_EXTRA_KERNELS: dict[str, Formula] = {
    "_scaled_dot_product_flash_attention_for_cpu": _cpu_attention,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _cpu_attention_backward,
    "_native_multi_head_attention": _native_attention,
    "_transformer_encoder_layer_fwd": _encoder_layer,
    "_grouped_mm": _grouped_mm,
    "mkldnn_rnn_layer": _rnn_layer,
    "mkldnn_rnn_layer_backward": _rnn_layer_backward,
}
EXTRA_FORMULAS: dict[Any, Formula] = {  # a release without one of them lacks its entry
    packet: _EXTRA_KERNELS[name] for name, packet in aten_packets(_EXTRA_KERNELS).items()}


def _convolution_backward(args: tuple, kwargs: dict, out: Any) -> int:
    """PyTorch's formula of ``convolution_backward``, applied to each group of a grouped
    convolution: on the whole of one it counts the weight's gradient ``groups`` times (as
    if every output channel read every input channel), a depthwise convolution's 64 times.
    Its gradients then cost what the convolution costs, as where ``groups`` is 1.

    >>> x, w = torch.ones(2, 8, 5), torch.ones(8, 1, 3)  # depthwise: 8 groups of one
    >>> out = (torch.ones(2, 8, 5), torch.ones(8, 1, 3), None)
    >>> args = (torch.ones(2, 8, 3), x, w, None, [1], [0], [1], False, [0], 8,
    ...         [True, True, False])
    >>> forward = 2 * 2 * 8 * 3 * 3  # batch × channels × outputs × taps, a multiply-add
    >>> _convolution_backward(args, {}, out) == 2 * forward
    True
    """
    formula = flop_counter.flop_registry[aten.convolution_backward]
    groups = args[9]
    if groups == 1:
        return int(formula(*args, **kwargs, out_val=out))
    grad_out, x, weight = (tuple(tensor.shape) for tensor in args[:3])

    def channels(shape: tuple, dim: int) -> tuple:  # one group's share of dimension dim
        return (*shape[:dim], shape[dim] // groups, *shape[dim + 1:])

    grad_input, grad_weight = (None if result is None else tuple(result.shape)
                               for result in out[:2])
    one = formula(channels(grad_out, 1), channels(x, 1), channels(weight, 0), *args[3:],
                  **kwargs, out_val=(grad_input and channels(grad_input, 1),
                                     grad_weight and channels(grad_weight, 0), out[2]))
    return int(one) * groups


#: Where PyTorch's own formula miscounts: taken instead of it (not of one registered since).
_CORRECTED: dict[Any, tuple[Any, Formula]] = {
    aten.convolution_backward: (getattr(flop_counter, "conv_backward_flop", None),
                                _convolution_backward)}


def formula_of(func: Any) -> Formula | None:
    """How to count the FLOPs of the ATen op ``func``: ``torch.utils.flop_counter``'s
    formula (those registered with ``register_flop_formula`` included; for a grouped
    convolution's backward, applied to each group), else :data:`EXTRA_FORMULAS`'s, else
    ``None``."""
    packet = func._overloadpacket
    formula = flop_counter.flop_registry.get(packet)
    own, corrected = _CORRECTED.get(packet, (None, None))
    if formula is not None and formula is own:
        return corrected
    if formula is not None:
        return lambda args, kwargs, out: int(formula(*args, **kwargs, out_val=out))
    extra = EXTRA_FORMULAS.get(packet)
    return None if extra is None else lambda args, kwargs, out: int(extra(args, kwargs, out))


def formulas_version() -> int:
    """A number that changes when a formula is registered (``register_flop_formula``), so
    that what was worked out with the formulas before can tell it is out of date."""
    return len(flop_counter.flop_registry)


def count_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    """The FLOPs of one ATen call (see :func:`formula_of`; 0 without a formula).

    >>> a, b = torch.ones(2, 3), torch.ones(3, 4)
    >>> count_flops(aten.mm.default, (a, b), {}, a @ b)
    48
    """
    formula = formula_of(func)
    return 0 if formula is None else formula(args, kwargs, out)


