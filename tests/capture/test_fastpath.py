"""Modules with fused fast paths compute exactly what they compute unrecorded, and show it."""

from __future__ import annotations

import warnings

import networkx as nx
import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import torchgraphrec as tgr
from helpers import nodes_of
from torchgraphrec import _torch
from torchgraphrec.capture import calls


def _encoder() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2).eval()


def _padded() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True
    return torch.randn(2, 5, 16), mask


@pytest.fixture(autouse=True)
def _quiet_nested_tensor_warning() -> None:
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")


def test_eval_no_grad_takes_the_fused_path_with_nested_tensors_and_the_same_result() -> None:
    model, (x, mask) = _encoder(), _padded()
    with torch.no_grad():
        expected = model(x, src_key_padding_mask=mask)
        recording = tgr.record(model, x, {"src_key_padding_mask": mask})
    assert torch.equal(recording.output, expected)
    tgr.validate(recording.graph)
    names = [a["name"] for a in sorted(nodes_of(recording.graph, "op").values(),
                                       key=lambda a: a["seq"])]
    assert names.count("_transformer_encoder_layer_fwd") == 2
    assert "_nested_tensor_from_mask" in names and names[-1] == "to_padded_tensor"
    nested = [a for a in nodes_of(recording.graph, "tensor").values() if a.get("nested")]
    assert nested and all(a["shape"] == (2,) for a in nested)  # two sequences, ragged


def test_training_records_the_python_path_at_the_torch_level() -> None:
    model, (x, mask) = _encoder(), _padded()
    model.train()
    expected = model(x, src_key_padding_mask=mask)
    recording = tgr.record(model, x, {"src_key_padding_mask": mask})
    assert torch.equal(recording.output, expected)
    names = {a["name"] for a in nodes_of(recording.graph, "op").values()}
    assert {"multi_head_attention_forward", "linear", "layer_norm"} <= names


def test_attention_in_eval_mode_runs_its_fused_kernel_while_recorded() -> None:
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = torch.randn(2, 4, 8)
    with torch.no_grad():
        expected, _ = attention(q, q, q, need_weights=False)
        recording = tgr.record(attention, (q, q, q), {"need_weights": False})
    assert torch.equal(recording.output[0], expected)
    ops = nodes_of(recording.graph, "op").values()
    assert [a["name"] for a in ops] == ["_native_multi_head_attention"]
    assert {"param:in_proj_weight", "param:out_proj.weight"} <= set(nodes_of(recording.graph, "param"))


@pytest.mark.needs("global_hook_kwargs")
def test_keyword_arguments_are_seen_before_the_call_without_module_hooks() -> None:
    assert _torch.call_kwargs_readable()
    model = _encoder()
    with tgr.Recorder(model):  # hooks on the encoder's layers would turn its fast path off
        assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())


def test_where_the_frame_cannot_be_read_module_hooks_see_keyword_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "call_kwargs_readable", lambda: False)

    class Add(nn.Module):
        def forward(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
            return p + q

    graph = tgr.record(Add(), (), {"p": torch.randn(2), "q": torch.randn(2)}).graph
    tgr.validate(graph)
    assert {a["name"] for a in nodes_of(graph, "tensor").values() if a["role"] == "input"} == \
        {"p", "q"}


@pytest.mark.needs("global_hook_kwargs")
@pytest.mark.parametrize("way", ["given by the modules", "read from the frame"])
def test_a_nested_calls_keyword_arguments_are_its_inputs(
        way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if way == "read from the frame":
        monkeypatch.setattr(calls, "global_pre_hook_takes_kwargs_by_id", lambda: False)

    class Scale(nn.Module):
        def forward(self, x: torch.Tensor, *, by: torch.Tensor) -> torch.Tensor:
            return x * by

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = Scale()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.scale(x + 1, by=x.exp())

    model = Outer()
    given = [dict(m._forward_pre_hooks_with_kwargs) for m in model.modules()]
    graph = tgr.record(model, torch.ones(3)).graph
    layer = graph.nodes["layer:scale#0"]
    producers = [next(iter(graph.predecessors(t))) for t in layer["inputs"]]
    assert [graph.nodes[p]["name"] for p in producers] == ["add", "exp"]
    assert [dict(m._forward_pre_hooks_with_kwargs) for m in model.modules()] == given


def test_a_recorder_failure_inside_an_op_never_reaches_the_forward(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torchgraphrec.capture.state import CaptureState

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("the op record went wrong")

    monkeypatch.setattr(CaptureState, "unknown", broken)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    x = torch.randn(2, 3)
    expected = model(x)
    with pytest.raises(tgr.CaptureError, match="the op record went wrong"):
        with tgr.Recorder(model) as recorder:
            assert torch.equal(model(x), expected)  # the forward ran on, as without us
            assert torch._C._len_torch_function_stack() == 0  # the op mode left at its end
            del recorder


class WithScripted(nn.Module):
    """An eager model with a scripted child: TorchScript runs its ops, no Python."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.before = nn.Linear(4, 4)
        self.scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
        self.after = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after(self.scripted(self.before(x)))


class _AtenNames(TorchDispatchMode):
    """The ATen ops a block runs, by name (what the recording should show)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_a_scripted_submodule_never_breaks_a_recording() -> None:
    # on torch 2.4 each module is hooked, and a ScriptModule refuses hooks: its call is
    # not seen there (the test below needs global hooks)
    model, x = WithScripted(), torch.randn(3, 4)
    recording = tgr.record(model, x, backward=True)
    assert torch.equal(recording.output, model(x))
    tgr.validate(recording.graph)


@pytest.mark.needs("global_hook_kwargs")
@pytest.mark.parametrize("grad", [True, False])
def test_a_scripted_submodule_is_recorded_at_the_aten_level(grad: bool) -> None:
    model, x = WithScripted(), torch.randn(3, 4)
    with torch.set_grad_enabled(grad):
        expected = model(x)
        with FlopCounterMode(display=False) as counter:
            model(x)
        with _AtenNames() as seen:
            model.scripted(model.before(x))
        recording = tgr.record(model, x, flops=True)
    graph = recording.graph
    assert torch.equal(recording.output, expected)
    assert graph.graph["flops"] == counter.get_total_flops()
    inside = sorted((a for a in nodes_of(graph, "op").values() if a["parent"] == "layer:scripted#0"),
                    key=lambda a: a["seq"])
    assert [a["name"] for a in inside] == seen.names[len(seen.names) - len(inside):]
    assert {"param:scripted.0.weight", "param:scripted.0.bias"} <= set(graph)
    [output] = graph.nodes["layer:scripted#0"]["outputs"]
    assert nx.has_path(graph, "tensor:0@v0", output)
    assert nx.has_path(graph, "param:scripted.0.weight", output)


class _ReadsItsWeightDetached(nn.Module):
    """Reads its weight through a detached alias TorchScript hands over, as torch 2.7's
    dispatcher hands a scripted module's callers a detach no mode saw."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.alias = self.lin.weight.detach()  # the weight's memory, no op between

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.alias.t()


@pytest.mark.needs("global_hook_kwargs")
def test_a_parameters_memory_read_unseen_at_the_aten_level_is_that_parameter() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(torch.jit.script(_ReadsItsWeightDetached()))
    graph = tgr.record(model, torch.randn(3, 4)).graph
    [output] = graph.nodes["layer:0#0"]["outputs"]
    # the truth: the alias is the weight's memory, the same elements read the same way
    assert model[0].alias.data_ptr() == model[0].lin.weight.data_ptr()
    assert nx.has_path(graph, "param:0.lin.weight", output)
    constants = [a for a in nodes_of(graph, "tensor").values() if a.get("role") == "constant"]
    assert constants == []
    assert graph.nodes["param:0.lin.weight"]["requires_grad"] is True  # the parameter's


class _CacheWriter(nn.Module):
    def forward(self, cache: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        cache[:, 1].copy_(key)
        return cache


class _WithScriptedWriter(nn.Module):
    """A scripted module writing into a cache through a view, then the cache read whole."""

    def __init__(self) -> None:
        super().__init__()
        self.writer = torch.jit.script(_CacheWriter())

    def forward(self, key: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        self.writer(cache, key * 2)
        return cache.sum(0)


@pytest.mark.needs("global_hook_kwargs")
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_scripted_write_is_what_the_cache_is_read_from(mode: str) -> None:
    # at the ATen level a write through a view was noted at the version before the
    # dispatcher counted it (and an inference tensor's not at all): the read of the cache
    # found a constant, or went past the scripted copy_ to the cache as it came in
    with getattr(torch, mode)():
        graph = tgr.record(_WithScriptedWriter(), (torch.randn(2, 4), torch.zeros(2, 3, 4))).graph
    tgr.validate(graph)
    ops = {attrs["name"]: node for node, attrs in nodes_of(graph, "op").items()}
    assert nx.has_path(graph, ops["copy_"], ops["sum"])
    assert not any(graph.nodes[p].get("role") == "input" for p in graph.predecessors(ops["sum"]))


class _FunctionNames(TorchFunctionMode):
    """The torch-level calls a user's own mode sees, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_under_a_users_function_mode_fast_path_modules_compute_as_unrecorded(mode) -> None:
    # a user's mode keeps them off their fast path; the recorder still stepped its op mode
    # aside for a dispatch mode, around which the slow path computes other numbers under
    # inference_mode (2.4e-7 apart on this encoder layer)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    with torch.device("cpu"), mode():
        expected = layer(x)
        recording = tgr.record(layer, x)
    assert torch.equal(recording.output, expected)
    tgr.validate(recording.graph)
    names = {a["name"] for a in nodes_of(recording.graph, "op").values()}
    assert {"multi_head_attention_forward", "linear", "layer_norm"} <= names
    assert "_transformer_encoder_layer_fwd" not in names


@pytest.mark.needs("global_hook_kwargs")
@pytest.mark.parametrize("grad", [True, False])
def test_a_users_function_mode_sees_nothing_of_a_scripted_submodule(grad: bool) -> None:
    # unrecorded, TorchScript's ops reach no torch-function mode; recorded, the mode saw
    # the ATen-level handler's calls (t, addmm, relu) and its reads (_version, shape)
    model, x = WithScripted(), torch.randn(3, 4)
    with torch.set_grad_enabled(grad):
        with _FunctionNames() as plain:
            model(x)
        with _FunctionNames() as recorded:
            graph = tgr.record(model, x).graph
    assert recorded.names == plain.names == ["linear", "linear"]
    inside = {a["name"] for a in nodes_of(graph, "op").values() if a["parent"] == "layer:scripted#0"}
    assert {"addmm", "relu"} <= inside
