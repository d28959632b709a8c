"""Costs against independent counts: FlopCounterMode, and saved-tensor hooks of the test's own."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import torchgraphrec as tgr
from helpers import fresh, nodes_of, run_plain
from models import ZOO
from torchgraphrec.recording import backward_loss


def _reference_flops(name: str, backward: bool) -> tuple[int, dict[str, int]]:
    """FlopCounterMode's total and per-module counts, attention on SDPA's math backend
    (which it counts; on CPU it counts the fused kernel as 0)."""
    case = fresh(name)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        output = case.model(*case.args, **case.kwargs)
        if backward:
            backward_loss(output).backward()
    root = type(case.model).__name__
    per_module = {name.removeprefix(root).removeprefix("."): sum(counts.values())
                  for name, counts in counter.get_flop_counts().items() if name != "Global"}
    return counter.get_total_flops(), per_module


def _recorded_flops(name: str, backward: bool) -> tuple[int, dict[str, int]]:
    graph = tgr.record(*fresh(name), flops=True, backward=backward).graph
    tgr.validate(graph)
    per_module: dict[str, int] = collections.Counter()
    for attrs in nodes_of(graph, "layer").values():
        per_module[attrs["qualname"]] += attrs["flops"] + attrs.get("backward_flops", 0)
    total = graph.graph["flops"] + graph.graph.get("backward_flops", 0)
    return total, {k: v for k, v in per_module.items() if v}


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


@pytest.mark.parametrize("name", list(ZOO))
def test_forward_flops_equal_flop_counter_mode_total_and_per_module(name: str) -> None:
    expected_total, expected = _reference_flops(name, backward=False)
    total, found = _recorded_flops(name, backward=False)
    assert total == expected_total
    assert found == _nonzero(expected)


@pytest.mark.parametrize("name", list(ZOO))
def test_forward_and_backward_flops_equal_flop_counter_mode_in_total(name: str) -> None:
    assert _recorded_flops(name, backward=True)[0] == _reference_flops(name, backward=True)[0]


#: Models whose modules' backward passes never interleave: there FlopCounterMode's
#: per-module backward counts (by time windows, between multi-grad hooks) are right.
CHAINS = ["mlp", "resnet_like", "looped_linear", "embedding", "direct_parameter"]


@pytest.mark.parametrize("name", CHAINS)
def test_backward_flops_per_module_equal_flop_counter_mode_where_it_can_tell(name: str) -> None:
    assert _recorded_flops(name, backward=True)[1] == \
        _nonzero(_reference_flops(name, backward=True)[1])


def test_backward_flops_go_to_the_op_whose_gradient_they_compute() -> None:
    # FlopCounterMode charges `right` with part of `left`'s backward here (their windows
    # interleave); each Linear's backward is exactly its weight gradient (inputs need none)
    graph = tgr.record(*fresh("two_inputs_kwargs"), flops=True, backward=True).graph
    left, right = graph.nodes["layer:left#0"], graph.nodes["layer:right#0"]
    assert (left["flops"], left["backward_flops"]) == (2 * 2 * 4 * 3, 2 * 2 * 4 * 3)
    assert (right["flops"], right["backward_flops"]) == (2 * 2 * 5 * 3, 2 * 2 * 5 * 3)


def test_attention_counts_the_same_whichever_kernel_ran() -> None:
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, batch_first=True)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 16)
    for model, args in ((attention, (x, x, x)), (layer, (x,))):
        slow = tgr.record(model.train(), args, flops=True).graph  # the Python path
        with torch.no_grad():
            fused = tgr.record(model.eval(), args, flops=True).graph  # the fused kernel
        fused_ops = {a["name"] for a in nodes_of(fused, "op").values()}
        assert fused_ops & {"_native_multi_head_attention", "_transformer_encoder_layer_fwd"}
        assert fused.graph["flops"] == slow.graph["flops"] > 0


class SavedCounter:
    """The test's own saved-tensor hooks: bytes saved, each storage once at its full size,
    parameters' and inputs' storages left out."""

    def __init__(self, excluded: set[int]) -> None:
        self.excluded, self.seen, self.bytes, self.calls = excluded, set(), 0, 0

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        storage = tensor.untyped_storage()
        if storage._cdata not in self.seen | self.excluded:
            self.seen.add(storage._cdata)
            self.bytes += storage.nbytes()
        return tensor.detach()

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        return packed


def _inputs_and_params(case) -> set[int]:
    tensors = [*case.model.parameters(), *case.model.buffers()]
    tensors += [t for t in [*case.args, *case.kwargs.values()] if isinstance(t, torch.Tensor)]
    return {t.untyped_storage()._cdata for t in tensors}


@pytest.mark.parametrize("name", list(ZOO))
def test_saved_bytes_equal_an_independent_count(name: str) -> None:
    case = fresh(name)
    counter = SavedCounter(_inputs_and_params(case))
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        case.model(*case.args, **case.kwargs)
    graph = tgr.record(*fresh(name)).graph
    assert graph.graph["saved_bytes"] == counter.bytes
    layers = nodes_of(graph, "layer").values()
    root = next(a for a in layers if a["parent"] is None)
    assert root["saved_bytes"] == counter.bytes
    assert all(a["saved_bytes"] >= 0 for a in nodes_of(graph, "op").values())


@pytest.mark.parametrize("name", ["resnet_like", "gpt2", "inplace"])
def test_a_users_saved_tensor_hooks_still_see_every_tensor(name: str) -> None:
    plain_case, recorded_case = fresh(name), fresh(name)
    plain = SavedCounter(set())
    with torch.autograd.graph.saved_tensors_hooks(plain.pack, plain.unpack):
        _, plain_grads = run_plain(plain_case, backward=True)
    theirs = SavedCounter(set())
    with torch.autograd.graph.saved_tensors_hooks(theirs.pack, theirs.unpack):
        recording = tgr.record(*recorded_case, backward=True)
    assert theirs.calls == plain.calls > 0
    grads = {n: p.grad for n, p in recorded_case.model.named_parameters() if p.grad is not None}
    assert grads.keys() == plain_grads.keys()
    assert all(torch.equal(grads[n], plain_grads[n]) for n in grads)
    assert recording.graph.graph["saved_bytes"] > 0


def test_where_saved_tensor_hooks_are_forbidden_the_recording_says_so() -> None:
    case = fresh("mlp")
    with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
        with pytest.warns(UserWarning, match="recorded without saved_bytes"):
            graph = tgr.record(*case).graph
    assert "saved_bytes" not in graph.graph
    assert not any("saved_bytes" in a for _, a in graph.nodes(data=True))


def test_under_no_grad_nothing_is_saved_and_sizes_and_times_are_there() -> None:
    with torch.no_grad():
        graph = tgr.record(*fresh("resnet_like")).graph
    assert "saved_bytes" not in graph.graph
    sizes = {"float32": 4, "int64": 8}
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] in ("tensor", "param"):
            assert attrs["bytes"] == sizes[attrs["dtype"]] * torch.Size(attrs["shape"]).numel()
        if attrs["kind"] in ("layer", "op"):
            assert attrs["forward_ms"] >= attrs["self_ms"] >= 0
    fc = graph.nodes["layer:fc#0"]
    assert fc["param_bytes"] == 4 * fc["num_params"]
    assert fc["output_bytes"] == 4 * 2 * 10


def test_backward_times_and_flops_go_to_the_op_whose_backward_ran() -> None:
    graph = tgr.record(*fresh("mlp"), flops=True, backward=True).graph
    first, second = graph.nodes["op:linear#0"], graph.nodes["op:linear#2"]
    assert first["backward_flops"] == first["flops"]  # its input needs no gradient
    assert second["backward_flops"] == 2 * second["flops"]  # input and weight gradients
    assert first["backward_ms"] >= 0 and graph.nodes["layer:0#0"]["backward_ms"] > 0


def test_flops_need_torch_ops() -> None:
    with pytest.raises(ValueError, match=r"flops=True needs ops='torch'"):
        tgr.record(nn.Linear(2, 2), torch.randn(1, 2), ops="autograd", flops=True)
