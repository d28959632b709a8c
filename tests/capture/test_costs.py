"""Costs against independent counts: FlopCounterMode, and saved-tensor hooks of the test's own."""

from __future__ import annotations

import collections
import contextlib
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd import forward_ad
from torch.utils import _python_dispatch as python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack, \
    is_in_torch_dispatch_mode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

import torchgraphrec as tgr
from helpers import Tripled, fresh, hook_state, nodes_of, run_plain
from torchgraphrec.capture.flops.formulas import EXTRA_FORMULAS
from models import ZOO
from torchgraphrec import _torch as torch_names
from torchgraphrec.recording import backward_loss


#: Whether PyTorch's FLOP counter has formulas of SDPA's fused CPU kernels (newer releases
#: do): then it counts the kernels that run, as the recorder does; where it has none, it
#: counts them as 0, and the reference runs SDPA's math backend, which the recorder's own
#: formulas of those kernels count as.
_COUNTS_CPU_ATTENTION = all(
    getattr(torch.ops.aten, name) in flop_registry
    for name in ("_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_flash_attention_for_cpu_backward"))


def _reference_flops(name: str, backward: bool) -> tuple[int, dict[str, int]]:
    """FlopCounterMode's total and per-module counts (see :data:`_COUNTS_CPU_ATTENTION`)."""
    case = fresh(name)
    kernels = contextlib.nullcontext() if _COUNTS_CPU_ATTENTION else sdpa_kernel(SDPBackend.MATH)
    # FlopCounterMode has no formula of oneDNN's LSTM kernel; it counts the step-by-step path
    with kernels, torch.backends.mkldnn.flags(enabled=False), \
            FlopCounterMode(display=False) as counter:
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
    # both on the step-by-step LSTM: the fused kernel's backward computes gradients that
    # path leaves out where nothing needs them (the next test compares it where all are)
    with torch.backends.mkldnn.flags(enabled=False):
        recorded = _recorded_flops(name, backward=True)[0]
    assert recorded == _reference_flops(name, backward=True)[0]


def test_an_lstm_counts_what_its_step_by_step_path_counts() -> None:
    torch.manual_seed(0)
    model, x = nn.LSTM(32, 48, num_layers=2), torch.randn(12, 3, 32, requires_grad=True)
    state = tuple(torch.zeros(2, 3, 48, requires_grad=True) for _ in range(2))
    with torch.backends.mkldnn.flags(enabled=False):  # the matmuls FlopCounterMode counts
        with FlopCounterMode(display=False) as forward:
            loss = model(x, state)[0].sum()
        with FlopCounterMode(display=False) as backward:
            loss.backward()
    graph = tgr.record(model, (x, state), flops=True, backward=True).graph  # oneDNN's kernel
    assert graph.graph["flops"] == forward.get_total_flops() == 2 * 36 * 4 * 48 * (80 + 96)
    assert graph.graph["backward_flops"] == backward.get_total_flops()


#: Models whose modules' backward passes never interleave: there FlopCounterMode's
#: per-module backward counts (by time windows, between multi-grad hooks) are right.
CHAINS = ["mlp", "resnet_like", "looped_linear", "embedding", "direct_parameter"]


@pytest.mark.parametrize("name", CHAINS)
def test_backward_flops_per_module_equal_flop_counter_mode_where_it_can_tell(name: str) -> None:
    assert _recorded_flops(name, backward=True)[1] == \
        _nonzero(_reference_flops(name, backward=True)[1])


def test_a_backward_that_counts_no_flops_totals_zero() -> None:
    model, x = nn.Sequential(nn.ReLU(), nn.Tanh()), torch.randn(2, 4, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    recording = tgr.record(model, x, flops=True, backward=True)
    assert recording.graph.graph["backward_flops"] == counter.get_total_flops() == 0
    assert recording.graph.nodes["layer:0#0"]["backward_flops"] == 0
    assert list(recording.costs()["backward_flops"]) == [0, 0, 0]
    # without a backward there is no backward total, not a 0
    assert "backward_flops" not in tgr.record(model, x, flops=True).graph.graph


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
    parameters' and inputs' storages left out. It holds every storage it saw, so that no
    storage freed meanwhile can lend its address to a new one."""

    def __init__(self, excluded: set[int]) -> None:
        self.excluded, self.seen, self.bytes, self.calls = excluded, set(), 0, 0
        self.held: list = []

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        storage = tensor.untyped_storage()
        self.held.append(storage)
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


@pytest.mark.needs("saved_bytes")
@pytest.mark.parametrize("name", list(ZOO))
def test_saved_bytes_equal_an_independent_count(name: str) -> None:
    case = fresh(name)
    counter = SavedCounter(_inputs_and_params(case))
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        case.model(*case.args, **case.kwargs)
    graph = tgr.record(*fresh(name), memory=True).graph
    assert graph.graph["saved_bytes"] == counter.bytes
    layers = nodes_of(graph, "layer").values()
    root = next(a for a in layers if a["parent"] is None)
    assert root["saved_bytes"] == counter.bytes
    assert all(a["saved_bytes"] >= 0 for a in nodes_of(graph, "op").values())


class _Saving(nn.Module):
    """A custom Function or a reentrant checkpoint (one too), last or between two calls."""

    def __init__(self, how: str, last: bool) -> None:
        super().__init__()
        self.how, self.last = how, last
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if self.how == "function":
            h = Tripled.apply(h)
        elif self.how == "function saving its output":
            h = _SavesItsOutput.apply(h)
        elif self.how == "function calling a module":
            h = _CallsModule.apply(h, self.b)
        else:
            h = torch.utils.checkpoint.checkpoint(self.b, h, use_reentrant=True)
        return h if self.last else self.c(h)


class _SavesItsOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = x.exp()
        ctx.save_for_backward(out)  # not a leaf once apply returns: the recorder detaches it
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * ctx.saved_tensors[0]


class _CallsModule(torch.autograd.Function):
    """Saves a tensor of the open call's, then ends in a submodule's call."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, module: nn.Module) -> torch.Tensor:
        ctx.save_for_backward(x * 3)
        return module(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return grad, None


def _saved_per_call(model: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """The test's own count per module call, its inner calls' included: the bytes saved
    while each call was open (a stack of calls kept by global hooks), each storage once,
    parameters, buffers and the input left out."""
    names = {module: name for name, module in model.named_modules()}
    counter = SavedCounter({t.untyped_storage()._cdata
                            for t in [*model.parameters(), *model.buffers(), x]})
    stack: list[str] = []
    per_call: dict[str, int] = collections.Counter()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        before = counter.bytes
        packed = counter.pack(tensor)
        for name in set(stack):
            per_call[name] += counter.bytes - before
        return packed

    hooks = [nn.modules.module.register_module_forward_pre_hook(
                 lambda module, args: stack.append(names[module])),
             nn.modules.module.register_module_forward_hook(
                 lambda module, args, out: stack.pop() and None)]  # the output as it was
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, counter.unpack):
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return {name: per_call.get(name, 0) for name in names.values()}


@pytest.mark.needs("saved_bytes")
@pytest.mark.parametrize("how", ["function", "function saving its output",
                                 "function calling a module", "reentrant checkpoint"])
@pytest.mark.parametrize("last", [True, False], ids=["last", "between calls"])
def test_what_a_custom_function_saves_counts_in_the_call_that_ran_it(how: str, last: bool) -> None:
    # saved as apply returns, while no op runs: the bytes went to the next op recorded (c's)
    # or, with no op after, were lost
    torch.manual_seed(0)
    model, x = _Saving(how, last), torch.randn(4, 8)
    expected = _saved_per_call(model, x)
    graph = tgr.record(model, x, memory=True).graph
    recorded = {a["qualname"]: a["saved_bytes"] for a in nodes_of(graph, "layer").values()}
    assert "detach" not in {a["name"] for a in nodes_of(graph, "op").values()}  # ours
    # the checkpoint's own call has no op to hold them: they sit on the last op of the call
    # it made, b's (costs.rst says so); every other call reads what it saved
    made = {"b"} if how == "reentrant checkpoint" else set()
    assert {name: recorded.get(name, 0) for name in expected if name not in made} == \
        {name: value for name, value in expected.items() if name not in made}
    assert graph.graph["saved_bytes"] == expected[""] > 0


@pytest.mark.needs("saved_bytes")
@pytest.mark.parametrize("lazy, x", [
    (lambda: nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d()), torch.randn(2, 3, 6, 6)),
    (lambda: nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(2)), torch.randn(2, 4)),
], ids=["conv and batch norm", "linear"])
def test_a_lazy_modules_weights_are_no_saved_activations(lazy, x: torch.Tensor) -> None:
    # filled in by the forward, in place: they were counted as what autograd saved
    torch.manual_seed(0)
    graph = tgr.record(lazy(), x, memory=True).graph
    torch.manual_seed(0)
    model = lazy()
    model(x)  # filled in: the test's count leaves out what the model holds
    expected = _saved_per_call(model, x)
    recorded = {a["qualname"]: a["saved_bytes"] for a in nodes_of(graph, "layer").values()}
    assert recorded == expected and expected[""] > 0


class _SideBranches(nn.Module):
    """Each step computes a branch in grad mode and drops it, then saves a tensor it keeps:
    the dropped branch's storages are freed while the forward runs, and new ones may take
    their addresses."""

    def __init__(self) -> None:
        super().__init__()
        self.side, self.main = nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(40):
            torch.tanh(self.side(x))
            x = torch.sigmoid(self.main(x))
        return x


@pytest.mark.needs("saved_bytes")
def test_a_storage_freed_while_the_forward_runs_never_hides_a_new_one() -> None:
    # the recorder let go of what it counted and kept the storages' addresses: a new
    # storage at a freed one's address went uncounted (133,120 of 163,840 bytes)
    torch.manual_seed(0)
    model, x = _SideBranches(), torch.randn(16, 32)
    counter = SavedCounter({t.untyped_storage()._cdata for t in [*model.parameters(), x]})
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        model(x)
    assert counter.bytes == 2 * 40 * 16 * 32 * 4  # each step's tanh and sigmoid results
    for _ in range(3):
        assert tgr.record(model, x, memory=True).graph.graph["saved_bytes"] == counter.bytes


@pytest.mark.needs("saved_bytes")
def test_what_a_forward_drops_of_its_own_graph_is_let_go_while_it_runs() -> None:
    import weakref

    from torchgraphrec.capture.saved import HELD_SAVED

    class Dropping(nn.Module):
        """Computes a branch whose graph it drops, then saves many more tensors."""

        def __init__(self) -> None:
            super().__init__()
            self.alive_after: list[bool] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            leaf = torch.ones(3, requires_grad=True)  # saved as it is by the mul below
            gone = weakref.ref(leaf)
            (leaf * x).sum().item()
            del leaf
            for _ in range(2 * HELD_SAVED):  # each exp saves its result
                x = x.exp().log1p()
            self.alive_after.append(gone() is not None)
            return x

    model = Dropping()
    model(torch.ones(3, requires_grad=True))
    graph = tgr.record(model, torch.ones(3, requires_grad=True), memory=True).graph
    assert model.alive_after == [False, False]  # plain, recorded
    assert graph.graph["saved_bytes"] > 0


@pytest.mark.needs("saved_bytes")
@pytest.mark.parametrize("name", ["resnet_like", "gpt2", "inplace"])
def test_a_users_saved_tensor_hooks_still_see_every_tensor(name: str) -> None:
    plain_case, recorded_case = fresh(name), fresh(name)
    plain = SavedCounter(set())
    with torch.autograd.graph.saved_tensors_hooks(plain.pack, plain.unpack):
        _, plain_grads = run_plain(plain_case, backward=True)
    theirs = SavedCounter(set())
    with torch.autograd.graph.saved_tensors_hooks(theirs.pack, theirs.unpack):
        recording = tgr.record(*recorded_case, backward=True, memory=True)
    assert theirs.calls == plain.calls > 0
    grads = {n: p.grad for n, p in recorded_case.model.named_parameters() if p.grad is not None}
    assert grads.keys() == plain_grads.keys()
    assert all(torch.equal(grads[n], plain_grads[n]) for n in grads)
    assert recording.graph.graph["saved_bytes"] > 0


def test_where_saved_tensor_hooks_are_forbidden_the_recording_says_so() -> None:
    case = fresh("mlp")
    with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
        with pytest.warns(UserWarning, match="recorded without saved_bytes") as caught:
            graph = tgr.record(*case, memory=True).graph
    assert [w.filename for w in caught] == [__file__]  # raised in a hook, named at the call
    assert "saved_bytes" not in graph.graph
    assert not any("saved_bytes" in a for _, a in graph.nodes(data=True))


_FIRST_WHERE_FORBIDDEN = """
import warnings, torch, torchgraphrec
warnings.simplefilter("ignore")
x = torch.ones(1, 2, requires_grad=True)
with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
    for memory in (False, True):
        rec = torchgraphrec.record(torch.nn.Linear(2, 2), x, memory=memory, backward=True)
        print(memory, "saved_bytes" in rec.graph.graph, x.grad is not None)
"""


def test_a_processs_first_recording_where_saved_tensor_hooks_are_forbidden_records() -> None:
    # the costs of reaching the recorder's hooks are measured at a process's first
    # recording, with a pack hook of their own: not where hooks are forbidden
    done = subprocess.run([sys.executable, "-c", _FIRST_WHERE_FORBIDDEN], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["False False True", "True False True"]


def test_under_no_grad_nothing_is_saved_and_sizes_and_times_are_there() -> None:
    with torch.no_grad():
        graph = tgr.record(*fresh("resnet_like"), memory=True).graph
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


@pytest.mark.needs("saved_bytes")
def test_a_recorders_forward_under_no_grad_reads_no_saved_bytes_and_its_flops() -> None:
    # its calls read 0 saved bytes, as if counted: a forward under no_grad saves nothing
    # for a backward, and nothing was counted there
    model, args, kwargs = fresh("resnet_like")
    with tgr.Recorder(model, memory=True, flops=True) as recorder:
        with torch.no_grad():
            model(*args, **kwargs)
        model(*args, **kwargs)
    graph = recorder.recording.graph
    alone = tgr.record(model, args, kwargs, memory=True, flops=True).graph
    forwards = collections.defaultdict(list)  # top call -> its calls and ops, in order
    for node, attrs in sorted(graph.nodes(data=True), key=lambda item: item[1]["seq"]):
        if attrs["kind"] in ("layer", "op"):
            forwards[_forward_of(graph, node)].append(attrs)
    one = [a for _, a in sorted(alone.nodes(data=True), key=lambda item: item[1]["seq"])
           if a["kind"] in ("layer", "op")]
    under_no_grad, with_grad = forwards.values()
    assert [a["label"] for a in under_no_grad] == [a["label"] for a in with_grad] == \
        [a["label"] for a in one]
    assert not any("saved_bytes" in attrs for attrs in under_no_grad)
    # as a recording of that forward alone reads them
    assert [a["saved_bytes"] for a in with_grad] == [a["saved_bytes"] for a in one]
    assert [a["flops"] for a in under_no_grad] == [a["flops"] for a in one]
    assert graph.graph["saved_bytes"] == alone.graph["saved_bytes"] > 0
    assert graph.graph["flops"] == 2 * alone.graph["flops"] > 0


def _forward_of(graph: Any, node: str) -> str:
    """The top call of the forward ``node`` ran in."""
    while graph.nodes[node]["parent"] is not None:
        node = graph.nodes[node]["parent"]
    return node


def test_backward_times_and_flops_go_to_the_op_whose_backward_ran() -> None:
    graph = tgr.record(*fresh("mlp"), flops=True, backward=True).graph
    first, second = graph.nodes["op:linear#0"], graph.nodes["op:linear#2"]
    assert first["backward_flops"] == first["flops"]  # its input needs no gradient
    assert second["backward_flops"] == 2 * second["flops"]  # input and weight gradients
    assert first["backward_ms"] >= 0 and graph.nodes["layer:0#0"]["backward_ms"] > 0


def test_a_model_without_ops_counts_zero_flops() -> None:
    counted = tgr.record(nn.Identity(), torch.randn(2), flops=True).graph
    uncounted = tgr.record(nn.Identity(), torch.randn(2)).graph
    assert counted.graph["flops"] == 0 and "flops" not in uncounted.graph


@pytest.mark.parametrize("cost", ["flops", "memory"])
@pytest.mark.parametrize("ops", ["autograd", None])
def test_costs_need_torch_ops(cost: str, ops: str | None) -> None:
    with pytest.raises(ValueError, match=rf"{cost}=True needs ops='torch'"):
        tgr.record(nn.Linear(2, 2), torch.randn(1, 2), ops=ops, **{cost: True})


@pytest.mark.needs("saved_bytes")
def test_saved_bytes_are_counted_only_when_asked_and_nothing_is_hooked_without() -> None:
    from torchgraphrec._torch import top_saved_tensor_hooks

    class Peeking(nn.Linear):
        """Notes the saved-tensor hooks active while its forward runs."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.hooks_seen = top_saved_tensor_hooks()
            return super().forward(x).relu()

    model, x = Peeking(3, 2), torch.randn(4, 3)
    graph = tgr.record(model, x, backward=True).graph
    assert model.hooks_seen is None
    assert "saved_bytes" not in graph.graph
    assert not any("saved_bytes" in attrs for _, attrs in graph.nodes(data=True))
    asked = tgr.record(model, x, memory=True).graph
    assert model.hooks_seen is not None
    assert asked.graph["saved_bytes"] == 4 * 2 * 4  # relu saves its result; x is an input


class Calls(nn.Module):
    """Runs ``body`` on its inputs: one torch-level call per test case."""

    def __init__(self, body) -> None:
        super().__init__()
        self.body = body

    def forward(self, *args):
        return self.body(*args)


def _counter_total(body, args: tuple) -> int:
    with FlopCounterMode(display=False) as counter:
        body(*args)
    return counter.get_total_flops()


def _ops_and_flops(body, args: tuple) -> list[tuple[str, int]]:
    graph = tgr.record(Calls(body), args, flops=True).graph
    return [(attrs["name"], attrs["flops"]) for attrs in nodes_of(graph, "op").values()]


_r = torch.randn
#: Calls whose FLOPs the op mode counts from their arguments (no dispatch mode), in the
#: shapes and spellings that change which ATen op runs beneath them.
DIRECT_CASES = {
    "linear 2-D": (lambda x, w, b: F.linear(x, w, b), (_r(4, 6), _r(5, 6), _r(5))),
    "linear 3-D no bias": (lambda x, w: F.linear(x, w), (_r(2, 3, 6), _r(5, 6))),
    "linear 3-D strided": (lambda x, w, b: F.linear(x.transpose(0, 1), w, b),
                           (_r(3, 2, 6), _r(5, 6), _r(5))),
    "linear 1-D input": (lambda x, w, b: F.linear(x, w, b), (_r(6), _r(5, 6), _r(5))),
    "linear by a vector": (lambda x, w: F.linear(x, w), (_r(4, 6), _r(6))),
    "linear empty": (lambda x, w: F.linear(x, w), (_r(0, 6), _r(5, 6))),
    "conv2d": (lambda x, w: F.conv2d(x, w, stride=2, padding=1), (_r(2, 4, 9, 9), _r(8, 4, 3, 3))),
    "conv2d same, dilated, grouped": (lambda x, w: F.conv2d(x, w, padding="same", dilation=2,
                                                            groups=2),
                                      (_r(1, 4, 8, 8), _r(6, 2, 3, 3))),
    "conv1d unbatched": (lambda x, w: F.conv1d(x, w), (_r(3, 10), _r(4, 3, 2))),
    "conv3d": (lambda x, w: torch.conv3d(x, w), (_r(1, 2, 4, 4, 4), _r(3, 2, 2, 2, 2))),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1),
                         (_r(1, 4, 5, 5), _r(4, 3, 3, 3))),
    "conv_transpose1d unbatched": (lambda x, w: F.conv_transpose1d(x, w), (_r(4, 7), _r(4, 2, 3))),
    "mm": (lambda a, b: torch.mm(a, b), (_r(3, 4), _r(4, 5))),
    "Tensor.mm by keyword": (lambda a, b: a.mm(mat2=b), (_r(3, 4), _r(4, 5))),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5), (_r(5), _r(3, 4), _r(4, 5))),
    "addmm by keyword": (lambda c, a, b: torch.addmm(c, mat1=a, mat2=b),
                         (_r(5), _r(3, 4), _r(4, 5))),
    "bmm": (lambda a, b: a.bmm(b), (_r(2, 3, 4), _r(2, 4, 5))),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b), (_r(2, 3, 5), _r(2, 3, 4), _r(2, 4, 5))),
}


@pytest.mark.parametrize("case", list(DIRECT_CASES))
def test_flops_counted_from_arguments_equal_flop_counter_modes(case: str) -> None:
    body, args = DIRECT_CASES[case]
    recorded = _ops_and_flops(body, args)
    assert sum(count for _, count in recorded) == _counter_total(body, args)
    assert all(count == 0 for _, count in recorded[:-1])  # all on the call (after a transpose)


def test_flops_of_calls_run_under_the_flop_mode_go_to_their_op() -> None:
    # matmul (no formula of its own: mm, bmm or nothing beneath) and attention
    q, k, v = _r(1, 2, 4, 8), _r(1, 2, 6, 8), _r(1, 2, 6, 8)

    def body(q, k, v):
        return torch.matmul(q, k.transpose(-1, -2)).sum() + \
            F.scaled_dot_product_attention(q, k, v).sum() + (q[0, 0, 0] @ q[0, 0, 0])

    with sdpa_kernel(SDPBackend.MATH):
        recorded = _ops_and_flops(body, (q, k, v))
        expected = _counter_total(body, (q, k, v))
    counts = [count for name, count in recorded
              if name in ("matmul", "scaled_dot_product_attention")]
    assert counts[0] == 2 * 2 * 4 * 8 * 6 and counts[1] > 0 and counts[2] == 0  # a dot: uncounted
    assert sum(count for _, count in recorded) == expected


class MatmulOnAdd(torch.Tensor):
    """A subclass whose own torch function runs a matmul for an addition."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.add:
            plain = [a.as_subclass(torch.Tensor) for a in args]
            return (plain[0] @ plain[1].T).as_subclass(cls)
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.needs("as_subclass_under_dispatch_mode")
def test_a_subclass_runs_its_op_under_the_flop_mode() -> None:
    a, b = _r(3, 4).as_subclass(MatmulOnAdd), _r(5, 4).as_subclass(MatmulOnAdd)
    body = lambda a, b: a.add(b)  # noqa: E731
    assert sum(count for _, count in _ops_and_flops(body, (a, b))) == \
        _counter_total(body, (a, b)) == 2 * 3 * 4 * 5


def test_with_formulas_registered_for_other_ops_every_op_runs_under_the_flop_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRA_FORMULAS, torch.ops.aten.relu, lambda args, kwargs, out: 7)
    recorded = _ops_and_flops(lambda x: torch.relu(x + 1), (_r(3),))
    assert recorded == [("add", 0), ("relu", 7)]


def test_a_dispatch_mode_entered_inside_the_recorder_block_sees_the_same_counts() -> None:
    model, x = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2)), _r(2, 3, 6, 6)
    model(x)
    with tgr.Recorder(model, flops=True) as recorder, FlopCounterMode(display=False) as counter:
        model(x)
    assert recorder.recording.graph.graph["flops"] == counter.get_total_flops() > 0


class PlainSubclass(torch.Tensor):
    """A subclass with PyTorch's default torch function (which runs ops with subclass
    handling off)."""


class AddIsMM(TorchFunctionMode):
    """A user's torch-function mode that runs a matmul where the model adds."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.add:
            return torch.mm(args[0], args[1])
        return func(*args, **(kwargs or {}))


class MMTwice(TorchDispatchMode):
    """A user's dispatch mode that runs every mm twice."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            func(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def _mm_twice(a):
    with MMTwice():
        return torch.mm(a, a)


def _grad_in_forward(x, weight):
    hidden = x * 1
    loss = F.linear(hidden, weight).sum()
    return torch.autograd.grad(loss, hidden, create_graph=True)[0]


def _backward_in_forward(x, weight):
    F.linear(x, weight).sum().backward()
    return F.linear(x, weight)


def _forward_mode_ad(x, weight):
    with forward_ad.dual_level():  # the tangent's products run beside the forward's
        dual = forward_ad.make_dual(x, torch.ones_like(x))
        return forward_ad.unpack_dual(F.linear(dual, weight)).tangent


def _fake_in_forward(a):
    # an infra mode entered in the forward sits at the stack's bottom, under the user's
    with FakeTensorMode(allow_non_fake_inputs=True):
        torch.mm(a, a)
    return torch.mm(a, a)


_library = torch.library.Library("tgr_test_costs", "DEF")  # noqa: F841 (kept for its op)
_library.define("rms_norm(Tensor x, Tensor w) -> Tensor")
_library.impl("rms_norm", lambda x, w: x @ w, "CompositeImplicitAutograd")

#: Where something other than the op itself decides what runs beneath it: each case's FLOPs
#: as FlopCounterMode counts them, with what surrounds the recording.
ODD_CASES = {
    "vmap": (lambda x, w: torch.vmap(lambda row: F.linear(row, w))(x),
             (_r(5, 4, 8), _r(16, 8)), contextlib.nullcontext),
    "a user's torch-function mode around it": (lambda a, b: a.add(b), (_r(4, 4), _r(4, 4)),
                                               AddIsMM),
    "a dispatch mode inside the forward": (_mm_twice, (_r(4, 4),), contextlib.nullcontext),
    "a custom op named like a free one": (lambda x, w: torch.ops.tgr_test_costs.rms_norm(x, w),
                                          (_r(4, 4), _r(4, 5)), contextlib.nullcontext),
    "a plain subclass": (lambda a, b: torch.mm(a, b), (_r(4, 4).as_subclass(PlainSubclass),
                                                       _r(4, 4).as_subclass(PlainSubclass)),
                         contextlib.nullcontext),
    "autograd.grad in the forward": (_grad_in_forward, (_r(4, 8, requires_grad=True), _r(16, 8)),
                                     contextlib.nullcontext),
    "a backward in the forward": (_backward_in_forward,
                                  (_r(4, 8), _r(16, 8, requires_grad=True)),
                                  contextlib.nullcontext),
    "forward-mode AD": (_forward_mode_ad, (_r(4, 8), _r(16, 8)), contextlib.nullcontext),
    "fake tensors in the forward, a user's dispatch mode around it":
        (_fake_in_forward, (_r(4, 4),), MMTwice),
}


@pytest.mark.parametrize("case", list(ODD_CASES))
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")  # forward AD's own
def test_what_runs_beneath_an_op_is_counted_as_flop_counter_mode_counts_it(case: str) -> None:
    body, args, around = ODD_CASES[case]
    with around():
        expected = _counter_total(body, args)
        recorded = sum(count for _, count in _ops_and_flops(body, args))
    assert recorded == expected > 0


class Passing(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.needs("global_hook_kwargs")
def test_a_dispatch_mode_a_users_hooks_keep_across_a_call_leaves_in_order() -> None:
    # entered by a pre-hook and left by a forward hook, which run on either side of the
    # recorder's own hooks: the FLOP mode goes back under it, and it leaves first
    layer, x, mode = nn.Linear(8, 16), _r(4, 8), Passing()
    layer.register_forward_pre_hook(lambda module, args: mode.__enter__() and None)
    layer.register_forward_hook(lambda module, args, out: mode.__exit__(None, None, None))
    with tgr.Recorder(layer, flops=True) as recorder:
        layer(x)
        assert [type(m).__name__ for m in _get_current_dispatch_mode_stack()] == ["FlopMode"]
        layer(x).sum().backward()
    graph = recorder.recording.graph
    assert (graph.graph["flops"], graph.graph["backward_flops"]) == (2 * 1024, 1024)
    assert not _get_current_dispatch_mode_stack()
    assert not python_dispatch.is_in_torch_dispatch_mode()  # PyTorch's flags as they were


def test_a_users_dispatch_mode_left_entered_by_a_raising_forward_stays_entered() -> None:
    # its pre-hook entered it, and the forward raised before the hook that would leave it
    layer, mode = nn.Linear(8, 16), Passing()
    layer.register_forward_pre_hook(lambda module, args: mode.__enter__() and None)
    was = is_in_torch_dispatch_mode()
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        tgr.record(layer, _r(4, 5), flops=True)
    assert _get_current_dispatch_mode_stack() == [mode] and is_in_torch_dispatch_mode()
    mode.__exit__(None, None, None)
    assert not _get_current_dispatch_mode_stack()
    # PyTorch's flags too: the FLOP mode, left from under the user's, left them set for
    # good (and for every test after this one)
    assert is_in_torch_dispatch_mode() == was


def test_counting_a_decomposition_in_the_backward_leaves_torchs_flags_as_they_were() -> None:
    # the FLOP mode entered itself again to count one (Llama's backward has them): torch
    # 2.4 keeps one old value of its flags per mode, and is_in_torch_dispatch_mode() stayed
    # true for the rest of the process
    was = is_in_torch_dispatch_mode()
    graph = tgr.record(*fresh("llama"), flops=True, backward=True).graph
    assert graph.graph["backward_flops"] > 0 and is_in_torch_dispatch_mode() == was


def _saved_by_op(graph) -> dict[str, int]:
    return {node: attrs["saved_bytes"] for node, attrs in graph.nodes(data=True)
            if attrs["kind"] == "op" and attrs.get("saved_bytes")}


@pytest.mark.skipif(not torch_names.SAVED_TENSOR_HOOKS_READABLE,
                    reason="this torch cannot tell which saved-tensor hooks are active")
@pytest.mark.parametrize("pack", ["keep", "compress", "clone"])
def test_saved_bytes_under_a_users_pack_hook_that_lets_the_tensor_go_are_all_counted(
        pack: str) -> None:
    # a pack hook that keeps no reference frees what it was given: the next op's result may
    # get the same address, and must still be counted as the storage it is
    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Sigmoid(),
                             nn.Linear(8, 2))

    x = torch.randn(3, 4)
    packs = {"keep": (lambda t: t, lambda t: t),
             "compress": (lambda t: t.to(torch.bfloat16), lambda t: t.float()),
             "clone": (lambda t: t.clone(), lambda t: t)}[pack]
    expected = _saved_by_op(tgr.record(model(), x, memory=True).graph)
    assert expected == {"op:tanh#1": 8 * 3 * 4, "op:sigmoid#3": 8 * 3 * 4}
    with torch.autograd.graph.saved_tensors_hooks(*packs):
        assert _saved_by_op(tgr.record(model(), x, memory=True).graph) == expected


@pytest.mark.skipif(not torch_names.SAVED_TENSOR_HOOKS_READABLE,
                    reason="this torch cannot tell which saved-tensor hooks are active, so "
                           "memory=True pushes none")
def test_memory_true_under_torch_func_says_what_to_do_instead() -> None:
    class UsesFuncGrad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            slope = torch.func.grad(lambda v: self.fc(v).sum())(x)
            return self.fc(x).sum() + slope.sum()

    model, x = UsesFuncGrad(), torch.randn(2, 3)
    assert torch.equal(tgr.record(model, x).output, model(x))  # without memory: records
    before = hook_state(model)
    with pytest.raises(RuntimeError, match="saved tensor hooks") as raised:
        tgr.record(model, x, memory=True)
    assert any("record it without memory=True" in note for note in raised.value.__notes__)
    assert hook_state(model) == before and torch_names.function_mode_depth() == 0


class _WritesWhatIsSaved(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        saved = self.fc(x).sigmoid()  # sigmoid saves its result for the backward
        return saved.mul_(2)  # which this writes over: the backward must refuse


@pytest.mark.needs("saved_bytes")
@pytest.mark.parametrize("how, written", [("in the forward", "[2, 3]"),
                                          ("optimizer step before the backward", "[3, 3]")])
def test_memory_true_keeps_autograds_check_of_a_saved_tensor_written_in_place(
        how: str, written: str) -> None:
    # with saved-tensor hooks on, autograd checks no versions: wrong gradients, no error
    torch.manual_seed(0)
    model = _WritesWhatIsSaved() if how == "in the forward" else nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)

    def run() -> None:
        loss = model(x).sum()
        if how != "in the forward":
            with torch.no_grad():  # a step between the forward and its backward
                model.weight.add_(1)  # saved by linear for x's gradient
        loss.backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run()
    with pytest.raises(RuntimeError, match="modified by an inplace operation: "
                                           rf"\[torch.FloatTensor \{written}\] is at version"):
        with tgr.Recorder(model, memory=True):
            run()


@pytest.mark.needs("saved_bytes")
@pytest.mark.parametrize("hooked", [0, 1], ids=["hooks first", "hooks second"])
def test_forwards_under_and_outside_a_users_hooks_unpack_each_by_its_own(hooked: int) -> None:
    # unpacking asked which hooks were on then, not which packed: a backward after both
    # forwards failed ("'torch.device' object has no attribute '_version'")
    torch.manual_seed(0)
    model, x = nn.Linear(4, 4), torch.randn(3, 4, requires_grad=True)

    def losses() -> torch.Tensor:
        total = []
        for k in range(2):
            hooks = torch.autograd.graph.save_on_cpu() if k == hooked else contextlib.nullcontext()
            with hooks:
                total.append(model(x).tanh().sum())
        return total[0] + total[1]

    losses().backward()
    expected = x.grad.clone()
    x.grad = None
    with tgr.Recorder(model, memory=True):
        losses().backward()
    assert torch.equal(x.grad, expected)
