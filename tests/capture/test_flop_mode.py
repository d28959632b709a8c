"""The FLOP mode against plain runs and FlopCounterMode: decompositions, grouped products."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import torchgraphrec as tgr
from torchgraphrec.capture.flops import mode
from torchgraphrec.recording import backward_loss


def _mlp(activation: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(nn.Linear(16, 64), activation, nn.Linear(64, 4)), torch.randn(8, 16)


#: Models whose ops reach a dispatch mode undecomposed though they have a decomposition
#: (``silu_backward`` and ``mish_backward`` in C++; ``gru``, ``rnn_tanh``,
#: ``native_batch_norm`` and ``upsample_nearest2d`` in Python): FlopCounterMode lets the
#: decomposition compute their results, whose rounding may differ from their kernels'.
DECOMPOSED: dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]] = {
    "silu": lambda: _mlp(nn.SiLU()),
    "mish": lambda: _mlp(nn.Mish()),
    "gru": lambda: (nn.GRU(16, 32, batch_first=True), torch.randn(4, 7, 16)),
    "rnn": lambda: (nn.RNN(16, 32, batch_first=True), torch.randn(4, 7, 16)),
    "batch_norm": lambda: (nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)),
                           torch.randn(2, 3, 9, 9)),
    "upsample": lambda: (nn.Sequential(nn.Conv2d(3, 8, 3), nn.Upsample(scale_factor=2)),
                         torch.randn(2, 3, 9, 9)),
}


def _built(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return DECOMPOSED[name]()


def _tensors(output: Any) -> list[torch.Tensor]:
    return [output] if isinstance(output, torch.Tensor) else \
        [item for item in output if isinstance(item, torch.Tensor)]


def _run(model: nn.Module, x: torch.Tensor, record: bool) -> tuple[list, list]:
    """The outputs and parameter gradients of one forward and backward, recorded with
    FLOPs or plain, from the same state (a batch norm's running statistics included)."""
    state = {key: value.clone() for key, value in model.state_dict().items()}
    model.zero_grad(set_to_none=True)
    if record:
        output = tgr.record(model, x, backward=True, flops=True).output
    else:
        output = model(x)
        backward_loss(output).backward()
    grads = [param.grad.clone() for param in model.parameters()]
    model.load_state_dict(state)
    return _tensors(output), grads


@pytest.mark.parametrize("name", list(DECOMPOSED))
def test_outputs_and_gradients_stay_bit_identical_where_an_op_has_a_decomposition(
        name: str) -> None:
    model, x = _built(name)
    plain_outputs, plain_grads = _run(model, x, record=False)
    outputs, grads = _run(model, x, record=True)
    assert all(torch.equal(a, b) for a, b in zip(plain_outputs, outputs, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, grads, strict=True))


@pytest.mark.parametrize("name", list(DECOMPOSED))
def test_an_op_with_a_decomposition_counts_as_flop_counter_mode_counts_it(name: str) -> None:
    model, x = _built(name)
    with FlopCounterMode(display=False) as counter:
        backward_loss(model(x)).backward()
    graph = tgr.record(model, x, backward=True, flops=True).graph
    assert graph.graph["flops"] + graph.graph["backward_flops"] == counter.get_total_flops()


def test_the_gru_is_counted_through_its_decomposition() -> None:
    # its kernel has no formula: only the decomposition on meta tensors counts its matmuls
    model, x = _built("gru")
    graph = tgr.record(model, x, flops=True).graph
    gates, hidden, inputs, steps, batch = 3, 32, 16, 7, 4
    assert graph.graph["flops"] == 2 * steps * batch * gates * hidden * (inputs + hidden)


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.devices: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Any = None) -> Any:
        for value in args:
            if isinstance(value, torch.Tensor):
                self.devices.add(value.device.type)
        return func(*args, **(kwargs or {}))


def test_a_users_dispatch_mode_sees_none_of_the_counted_decomposition() -> None:
    model, x = _built("silu")
    with _Seen() as seen:
        tgr.record(model, x, backward=True, flops=True)
    assert seen.devices == {"cpu"}  # the recorder's meta tensors stay its own


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="this torch has no _grouped_mm")
@pytest.mark.parametrize(("first", "second", "offsets"), [
    ((48, 32), (4, 32, 64), [12, 24, 36, 48]),  # tokens by expert: 2D @ 3D
    ((4, 12, 32), (4, 32, 64), None),  # a batch of equal groups: 3D @ 3D
    ((12, 64), (64, 32), [16, 32, 48, 64]),  # groups split the contraction: 2D @ 2D
])
def test_a_grouped_matmul_counts_as_its_groups_matmuls(first: tuple, second: tuple,
                                                       offsets: Any) -> None:
    class Experts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(*second))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            offs = None if offsets is None else torch.tensor(offsets, dtype=torch.int32)
            return torch._grouped_mm(x, self.weight, offs=offs)

    model, x = Experts(), torch.randn(*first, requires_grad=True)
    with FlopCounterMode(display=False) as counter:  # the same groups as plain matmuls
        for a, b in _groups(x, model.weight, offsets):
            _ = a @ b
    with tgr.Recorder(model, flops=True) as recorder:
        # not backward_loss's sum: torch's kernel refuses its expanded gradient
        model(x).pow(2).sum().backward()
    graph = recorder.graph
    assert graph.graph["flops"] == counter.get_total_flops() > 0
    assert graph.graph["backward_flops"] == 2 * graph.graph["flops"]  # a gradient per operand


def _groups(a: torch.Tensor, b: torch.Tensor, offsets: Any) -> list[tuple]:
    if offsets is None:
        return list(zip(a, b))
    bounds = list(zip([0] + offsets[:-1], offsets))
    if b.dim() == 3:
        return [(a[start:end], expert) for (start, end), expert in zip(bounds, b)]
    return [(a[:, start:end], b[start:end]) for start, end in bounds]


def _remembered(op: Any) -> int:
    """How many calls of ``op`` are remembered as counting nothing."""
    return sum(1 for key in mode._COUNTS_NOTHING if key[0] is op)


def test_an_elementwise_decomposition_runs_on_meta_tensors_once_per_shape() -> None:
    # a ResNet's every batch norm would otherwise pay for a decomposition it counts 0 in
    for name in ("silu", "gru"):
        model, x = _built(name)
        tgr.record(model, x, backward=True, flops=True)
    assert _remembered(torch.ops.aten.silu_backward.default) >= 1
    assert _remembered(torch.ops.aten.gru.input) == 0  # its matmuls count


class _Products(nn.Module):
    """A product whose decomposition counts nothing (a matrix times a vector runs ``mv``;
    an einsum over a dimension of size 1 multiplies elementwise), then the same op on
    shapes where it counts."""

    def forward(self, a: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        first = torch.matmul(a, v).sum() + torch.matmul(a, b).sum()
        x = a.unsqueeze(0)
        trivial = torch.einsum("bxd,byd->bxy", x[..., :1], x[..., :1])
        return first + trivial.sum() + torch.einsum("bxd,byd->bxy", x, x).sum()


def test_an_op_that_counted_nothing_on_some_shapes_counts_on_others() -> None:
    # under inference mode matmul and einsum reach the FLOP mode whole; a matrix-vector
    # product counting 0 once made every later matmul count 0, in every later recording
    a, v, b = torch.randn(6, 8), torch.randn(8), torch.randn(8, 4)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:  # under inference mode
        _Products()(a, v, b)  # older torch's counter sees matmul and einsum whole: 0
    with torch.inference_mode():
        for _ in range(2):  # the second from what the first remembered
            recording = tgr.record(_Products(), (a, v, b), flops=True)
            assert recording.graph.graph["flops"] == counter.get_total_flops() > 0


#: Grouped convolutions: depthwise, two groups, transposed, in one to three dimensions.
GROUPED = {
    "depthwise_1d": lambda: (nn.Conv1d(8, 8, 3, groups=8), torch.randn(2, 8, 11)),
    "two_groups_2d": lambda: (nn.Conv2d(4, 6, 3, stride=2, groups=2), torch.randn(2, 4, 9, 9)),
    "transposed_2d": lambda: (nn.ConvTranspose2d(4, 6, 3, groups=2), torch.randn(2, 4, 5, 5)),
    "depthwise_3d": lambda: (nn.Conv3d(4, 8, 2, groups=4), torch.randn(1, 4, 5, 5, 5)),
}


def _group_by_group(conv: nn.Module, x: torch.Tensor) -> int:
    """FlopCounterMode's count of ``conv``'s forward and backward run as one ungrouped
    convolution per group (which its formulas count right), the same loss's gradients."""
    groups, transposed = conv.groups, isinstance(conv, nn.modules.conv._ConvTransposeNd)
    inputs, outputs = conv.in_channels // groups, conv.out_channels // groups
    weights = conv.weight.detach().split(inputs if transposed else outputs)
    run = getattr(F, f"conv_transpose{x.dim() - 2}d" if transposed else f"conv{x.dim() - 2}d")
    options = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation)
    x = x.detach().requires_grad_()
    with FlopCounterMode(display=False) as counter:
        parts = [run(part, weight.requires_grad_(), **options)
                 for part, weight in zip(x.split(inputs, dim=1), weights)]
        backward_loss(torch.cat(parts, dim=1)).backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", list(GROUPED))
def test_a_grouped_convolution_counts_as_its_groups_convolutions(name: str) -> None:
    torch.manual_seed(0)
    conv, x = GROUPED[name]()
    conv.bias = None  # PyTorch counts no bias, whole or by group
    graph = tgr.record(conv, x.requires_grad_(), backward=True, flops=True).graph
    assert graph.graph["backward_flops"] == 2 * graph.graph["flops"]  # input and weight
    assert graph.graph["flops"] + graph.graph["backward_flops"] == _group_by_group(conv, x)


class _NestedProduct(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b).softmax(-1)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_product_of_strided_nested_tensors_records_with_flops(mode: str) -> None:
    # remembering what a call counted read its tensors' shapes, which a strided nested
    # tensor cannot give: the recording raised inside the user's forward
    a = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)])
    b = torch.nested.nested_tensor([torch.randn(3, 5), torch.randn(3, 5)])
    with getattr(torch, mode)():
        expected = _NestedProduct()(a, b)
        recording = tgr.record(_NestedProduct(), (a, b), flops=True)
    assert all(torch.equal(x, y) for x, y in zip(recording.output.unbind(), expected.unbind()))
    tgr.validate(recording.graph)


class Attention(nn.Module):
    def __init__(self, grouped: bool = False) -> None:
        super().__init__()
        self.grouped = grouped  # enable_gqa: torch 2.5 and later

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, **({"enable_gqa": True} if self.grouped
                                                           else {}))


def _qkv(kv_heads: int = 2) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)  # four query heads
    return (torch.randn(1, 4, 8, 16), torch.randn(1, kv_heads, 8, 16),
            torch.randn(1, kv_heads, 8, 16))


@pytest.mark.needs("grouped_query_attention")
@pytest.mark.parametrize("backward", [False, True])
def test_grouped_query_attention_counts_as_the_query_heads_matmuls(backward: bool) -> None:
    """torch 2.10's CPU kernel takes fewer key/value heads than query heads, which
    sdpa_flop_count before torch 2.13 refuses (record(flops=True) raised in the forward)."""
    q, k, v = _qkv()
    if backward:  # all three: every kernel computes each gradient then
        for tensor in (q, k, v):
            tensor.requires_grad_()
    graph = tgr.record(Attention(grouped=True), (q, k, v), flops=True, backward=backward).graph
    batch, heads, length, dim = q.shape
    # the truth, by hand: scores q @ kᵀ and output scores @ v, per query head
    each = 2 * (2 * batch * heads * length * length * dim)
    assert graph.nodes["layer:#0"]["flops"] == each
    if backward:
        # PyTorch's own formula where it has one for this kernel (torch 2.15: it counts the
        # scores recomputed too); else ours, the gradients of both products: two each
        q, k, v = (tensor.detach().requires_grad_() for tensor in _qkv())
        out = Attention(grouped=True)(q, k, v)
        with FlopCounterMode(display=False) as counter:
            out.sum().backward()
        expected = counter.get_total_flops() or 2 * each
        assert graph.nodes["layer:#0"]["backward_flops"] == expected


def test_a_formula_that_raises_fails_the_recording_not_the_forward(monkeypatch) -> None:
    from helpers import hook_state

    def refuses(*args: Any) -> int:  # as torch 2.10's sdpa_flop_count did on these shapes
        raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")

    # every op the FLOP mode counts (attention is counted there, whatever the kernel)
    monkeypatch.setattr(mode, "formula_of", lambda func: refuses)
    model, ran = Attention(), []
    model.register_forward_hook(lambda *_: ran.append(True))
    before = hook_state(model)
    with pytest.raises(tgr.CaptureError, match=r"^the recorder failed: AssertionError\("
                                               r"'sdpa_flop_count: query/key/value"):
        tgr.record(model, _qkv(kv_heads=4), flops=True)
    assert ran == [True]  # the forward ran to its end
    assert hook_state(model) == before
