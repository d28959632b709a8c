"""Every input kind: sparse tensors, subclasses, checkpoints, fake tensors, NumPy arguments, modules built in a forward."""

from __future__ import annotations

import contextlib
import copy
import warnings

import networkx as nx
import numpy as np
import pytest
import torch
import torch.utils.checkpoint
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode

import torchgraphrec as tgr
from helpers import nodes_of
from torchgraphrec.recording import backward_loss

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (invariant checks|CSR)")


def _sparse(values: torch.Tensor, layout: torch.layout) -> torch.Tensor:
    indices = torch.tensor([[0, 1, 3, 4], [2, 0, 1, 3]])
    coo = torch.sparse_coo_tensor(indices, values, (5, 4)).coalesce()
    return coo if layout == torch.sparse_coo else coo.to_sparse_csr()


class SparseModel(nn.Module):
    """Sparse products: of the input, and of a sparse intermediate autograd saves."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled = x * 3.0  # sparse, saved by the product below
        return (torch.sparse.mm(x, self.weight) + torch.sparse.mm(scaled, self.weight)).relu()


def _storages(tensor: torch.Tensor) -> list:
    """The test's own reading of where a saved tensor keeps its data."""
    if tensor.layout == torch.sparse_coo:
        parts = [tensor._indices(), tensor._values()]
    elif tensor.layout == torch.sparse_csr:
        parts = [tensor.crow_indices(), tensor.col_indices(), tensor.values()]
    else:
        parts = [tensor]
    return [part.untyped_storage() for part in parts]


@pytest.mark.needs("saved_bytes")
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=str)
def test_sparse_inputs_in_grad_mode_record_the_bytes_their_parts_save(layout) -> None:
    torch.manual_seed(0)
    model, values = SparseModel(), torch.randn(4)
    plain_model, plain_x = copy.deepcopy(model), _sparse(values, layout).requires_grad_()
    seen = {s._cdata for s in _storages(plain_x) + _storages(plain_model.weight)}
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        for storage in _storages(tensor):
            if storage._cdata not in seen:
                seen.add(storage._cdata)
                saved += storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        expected = plain_model(plain_x)
    backward_loss(expected).backward()
    x = _sparse(values, layout).requires_grad_()
    recording = tgr.record(model, x, backward=True, flops=True, memory=True)
    tgr.validate(recording.graph)
    assert saved > 0 and recording.graph.graph["saved_bytes"] == saved
    assert torch.equal(recording.output, expected)
    assert torch.equal(model.weight.grad, plain_model.weight.grad)
    assert torch.equal(x.grad.to_dense(), plain_x.grad.to_dense())


class Wrapped(torch.Tensor):
    """A wrapper subclass (as DTensor is one): its data is the tensor it wraps."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> "Wrapped":
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype,
                                                   device=elem.device,
                                                   requires_grad=elem.requires_grad)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(value):
            return value.elem if isinstance(value, Wrapped) else value

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda v: Wrapped(v) if isinstance(v, torch.Tensor) else v, out)


class Passing(TorchDispatchMode):
    """A user's dispatch mode that runs every op as it is."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _wrapped_model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    model[0].weight = nn.Parameter(Wrapped(model[0].weight.detach()))
    model[0].bias = nn.Parameter(Wrapped(model[0].bias.detach()))
    return model, Wrapped(torch.randn(5, 3))


@pytest.mark.parametrize("flops", [False, True])
def test_a_saved_subclass_keeps_its_type_under_a_users_dispatch_mode(flops: bool) -> None:
    model, x = _wrapped_model()
    plain = copy.deepcopy(model)
    with Passing():
        recording = tgr.record(model, x, flops=flops, memory=True)
        # tanh saves its result: handed back by the recorder's hook as it was saved (its
        # type alone in the assertion: a stripped wrapper has no data to print)
        saved_type = type(recording.output.grad_fn._saved_result)
        assert saved_type is Wrapped
        backward_loss(recording.output).backward()
        backward_loss(plain(x)).backward()
    for (name, param), (_, expected) in zip(model.named_parameters(), plain.named_parameters()):
        assert type(param.grad) is Wrapped, name
        assert torch.equal(param.grad.elem, expected.grad.elem), name


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.utils.checkpoint.checkpoint(self.body, self.stem(x), use_reentrant=True)
        return self.head(hidden)


@pytest.mark.parametrize("memory", [False, True])
def test_a_reentrant_checkpoints_recomputation_is_counted_in_its_backward(memory: bool) -> None:
    torch.manual_seed(0)
    model, x = Checkpointed(), torch.randn(3, 4)
    plain = copy.deepcopy(model)
    with FlopCounterMode(display=False) as counter:
        expected = plain(x)
        forward = counter.get_total_flops()
        backward_loss(expected).backward()
    recording = tgr.record(model, x, backward=True, flops=True, memory=memory)
    graph = recording.graph
    assert graph.graph["flops"] == forward
    assert graph.graph["flops"] + graph.graph["backward_flops"] == counter.get_total_flops()
    # the recomputation and the body's backward are the checkpointed call's
    layers = nodes_of(graph, "layer")
    assert layers["layer:body#0"]["backward_flops"] > 2 * layers["layer:body#0"]["flops"]
    assert torch.equal(recording.output, expected)
    for (name, param), (_, want) in zip(model.named_parameters(), plain.named_parameters()):
        assert torch.equal(param.grad, want.grad), name


@pytest.mark.parametrize("memory", [False, True])
def test_a_backward_under_fake_tensors_records_its_flops(memory: bool) -> None:
    with FakeTensorMode():
        model, plain = (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
                        for _ in range(2))
        x, plain_x = (torch.randn(3, 4, requires_grad=True) for _ in range(2))
        with FlopCounterMode(display=False) as counter:
            backward_loss(plain(plain_x)).backward()
        graph = tgr.record(model, x, backward=True, flops=True, memory=memory).graph
        grads = [(type(p.grad), p.grad.shape) for p in model.parameters()]
    assert graph.graph["flops"] + graph.graph["backward_flops"] == counter.get_total_flops() > 0
    assert grads == [(FakeTensor, p.shape) for p in model.parameters()]
    assert type(x.grad) is FakeTensor and x.grad.shape == x.shape


class BackwardInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F.linear(x, self.weight).sum().backward()
        return F.linear(x, self.weight)


@pytest.mark.parametrize("memory", [False, True])
def test_a_backward_inside_the_forward_has_its_flops_on_a_backward_op(memory: bool) -> None:
    torch.manual_seed(0)
    model, x = BackwardInForward(), torch.randn(4, 8)
    loss = F.linear(x, copy.deepcopy(model).weight).sum()
    with FlopCounterMode(display=False) as backward_counter:
        loss.backward()
    with FlopCounterMode(display=False) as linear_counter:
        F.linear(x, model.weight)
    graph = tgr.record(model, x, flops=True, memory=memory).graph
    ops = [(a["name"], a["flops"]) for a in nodes_of(graph, "op").values()]
    assert ops[2:] == [("backward", backward_counter.get_total_flops()),
                       ("linear", linear_counter.get_total_flops())]
    assert graph.nodes["op:backward#2"]["grad_fn"] is None


class NumpyIndexed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x[np.array([0, 2])]
        columns = x[:, np.array([True, False, True])]
        return rows.sum() + columns.sum() + x[np.int64(1)].sum()


def test_numpy_arrays_among_an_ops_arguments_are_recorded_and_written() -> None:
    x = torch.randn(4, 3)
    recording = tgr.record(NumpyIndexed(), x)
    assert torch.equal(recording.output, NumpyIndexed()(x))
    indexing = [a["args"] for a in nodes_of(recording.graph, "op").values()
                if a["name"] == "getitem"]
    assert indexing == [f"[{np.array([0, 2])!r}]",
                        f"[:, {np.array([True, False, True])!r}]", f"[{np.int64(1)!r}]"]


class Unprintable:
    """An argument whose repr and == raise."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no ==")

    __hash__ = object.__hash__


DEFAULT = Unprintable()


def scale(tensor: torch.Tensor, factor: object, offset: object = DEFAULT) -> torch.Tensor:
    """A user's function that torch-function modes see, with any values for arguments."""
    if torch.overrides.has_torch_function((tensor,)):
        return torch.overrides.handle_torch_function(scale, (tensor,), tensor, factor,
                                                     offset=offset)
    return tensor * 2


class Scaled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale(x, np.array([1.0, 2.0]), offset=Unprintable())


def test_any_argument_value_is_recorded_never_a_crash() -> None:
    x = torch.randn(2, 3)
    recording = tgr.record(Scaled(), x)
    assert torch.equal(recording.output, x * 2)
    [op] = nodes_of(recording.graph, "op").values()
    assert (op["name"], op["args"]) == ("scale", f"{np.array([1.0, 2.0])!r}, offset=<Unprintable>")


class BuiltInForward(nn.Module):
    """Keras-style: its layers and a scale are made by the first forward, for its input."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not len(self.layers):
            self.layers.append(nn.Sequential(nn.Linear(x.shape[-1], 4), nn.ReLU()))
            self.layers.append(nn.Linear(4, 2))
            self.register_buffer("shift", torch.ones(2))
            self.scale = nn.Parameter(torch.full((2,), 0.5))
        for layer in self.layers:
            x = layer(x)
        return x * self.scale + self.shift


def _calls_and_params(graph) -> tuple[list[str], dict[str, set[str]]]:
    calls = sorted(f"{a['qualname']}#{a['call_index']}" for a in nodes_of(graph, "layer").values())
    users = {node: {graph.nodes[op]["name"] for op in graph.successors(node)}
             for node in nodes_of(graph, "param")}
    return calls, users


def test_modules_and_parameters_built_in_the_first_forward_are_recorded() -> None:
    torch.manual_seed(0)
    model, x = BuiltInForward(), torch.randn(3, 5)
    recording = tgr.record(model, x, backward=True)
    tgr.validate(recording.graph)
    calls, users = _calls_and_params(recording.graph)
    # the model as its first forward left it, recorded again: the same calls and params
    assert (calls, users) == _calls_and_params(tgr.record(model, x).graph)
    assert calls == ["#0", "layers.0#0", "layers.0.0#0", "layers.0.1#0", "layers.1#0"]
    named = {f"param:{name}" for name, _ in [*model.named_parameters(), *model.named_buffers()]}
    assert set(users) == named
    assert users["param:layers.0.0.weight"] == {"linear"}
    assert users["param:scale"] == {"mul"} and users["param:shift"] == {"add"}
    layers = nodes_of(recording.graph, "layer")
    assert layers["layer:layers.0#0"]["num_params"] == 5 * 4 + 4
    assert torch.equal(recording.output, model(x))


class Accumulates(nn.Module):
    """Keeps a running sum by assigning a new tensor to its buffer each forward."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("acc", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.acc = self.acc + x
        return self.acc * 2


@pytest.mark.parametrize("mode", [torch.enable_grad, torch.no_grad, torch.inference_mode])
def test_a_buffer_assigned_a_new_value_is_read_from_what_made_it(mode) -> None:
    # the new value took the buffer's param node: mul was wired to the zeros it never read,
    # and the add that made its value had no reader
    with mode():
        recorder = tgr.Recorder(Accumulates())
        with recorder:
            for _ in range(2):
                recorder.model(torch.ones(4))
    graph = recorder.graph
    tgr.validate(graph)
    ops = sorted(nodes_of(graph, "op"), key=lambda node: graph.nodes[node]["seq"])
    assert [graph.nodes[op]["name"] for op in ops] == ["add", "mul", "add", "mul"]
    assert list(graph.successors("param:acc")) == [ops[0]]  # the first value, read once
    assert list(graph.predecessors(ops[1])) == [ops[0]]
    assert ops[0] in graph.predecessors(ops[2])  # the second forward adds to the first sum
    assert list(graph.predecessors(ops[3])) == [ops[2]]


class ZeroesARowUnderNoGrad(nn.Module):
    """Writes a view under ``no_grad``, as ``nn.Embedding`` does with its padding row, and
    returns such a view: reading its ``grad_fn`` raises in plain PyTorch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            self.fc.weight[0].zero_()
        y = self.fc(x)
        with torch.no_grad():
            first = y[0]
            first.zero_()
        return y.sum(1), first


@pytest.mark.parametrize("ops", ["torch", "autograd", None])
def test_views_written_under_no_grad_are_recorded(ops: str | None) -> None:
    torch.manual_seed(0)
    model, x = ZeroesARowUnderNoGrad(), torch.randn(2, 4)
    expected = ZeroesARowUnderNoGrad()
    expected.load_state_dict(model.state_dict())
    recording = tgr.record(model, x, ops=ops)
    tgr.validate(recording.graph)
    assert all(torch.equal(a, b) for a, b in zip(recording.output, expected(x)))
    if ops == "torch":
        ops_seen = [attrs["name"] for attrs in nodes_of(recording.graph, "op").values()]
        assert ops_seen.count("zero_") == 2 and "linear" in ops_seen


def _jagged(*lengths: int) -> torch.Tensor:
    with warnings.catch_warnings():  # "nested tensors are a prototype"
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.randn(n, 4) for n in lengths],
                                          layout=torch.jagged)


@pytest.mark.parametrize("ops", ["torch", "autograd", None])
@pytest.mark.parametrize("grad", [False, True])
def test_jagged_nested_tensors_are_recorded_with_their_regular_dimensions(
        ops: str | None, grad: bool) -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU()), _jagged(2, 3)
    with torch.set_grad_enabled(grad), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        recording = tgr.record(model, x, ops=ops)
        plain = model(x)
    graph = recording.graph
    tgr.validate(graph)
    assert torch.equal(recording.output.values(), plain.values())
    tensors = nodes_of(graph, "tensor")
    assert len(tensors) == 3  # the input, the Linear's output, the ReLU's
    for attrs in tensors.values():
        # the batch is regular, the sequence ragged: only the batch is a number
        assert attrs["shape"] == (2,) and attrs["nested"] and "bytes" not in attrs
    if ops == "torch":
        assert [attrs["shape"] for attrs in nodes_of(graph, "op").values()] == [(2,), (2,)]


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: self.a(t), lambda t: self.b(t), (x,))


@pytest.mark.skipif(not hasattr(torch, "cond"), reason="this torch has no torch.cond")
@pytest.mark.parametrize("ops", ["torch", None])
def test_torch_cond_in_an_eager_forward_records_or_says_why_not(ops: str | None) -> None:
    torch.manual_seed(0)
    model, x = Branches(), torch.randn(2, 3)
    with warnings.catch_warnings():  # dynamo's own, on what it cannot trace
        warnings.simplefilter("ignore")
        try:
            recording = tgr.record(model, x, ops=ops)
        except Exception as raised:  # noqa: BLE001 - whether dynamo can trace depends on the torch
            notes = getattr(raised, "__notes__", [])
            assert any("record the modules it calls on their own" in n for n in notes), notes
        else:
            assert torch.equal(recording.output, model(x))
        assert torch.equal(tgr.record(model.a, x).output, model.a(x))


class _Noisy(nn.Module):
    """Noise from a generator of its own, passed to the op as an argument."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn(x.shape, generator=self.generator)


def test_an_argument_whose_repr_names_an_address_reads_the_same_in_every_recording() -> None:
    # a default repr's memory address made two recordings of one model differ
    texts = [nodes_of(tgr.record(_Noisy(), torch.zeros(2, 3)).graph, "op")["op:randn#0"]["args"]
             for _ in range(2)]
    assert texts[0] == texts[1] == "(2, 3), generator=<Generator>"


class _SwapsData(nn.Module):
    """``y.data = z``: y holds z's value from then on, and a's result is dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, z = self.a(x), self.b(x)
        y.data = z
        return y * 2


class _NormalizesThroughData(nn.Module):
    """The old weight normalisation: the weight's ``.data`` set to a value made from it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.lin.weight
        weight.data = weight / weight.norm()
        return self.lin(x)


@pytest.mark.parametrize("mode", ["grad", "no_grad"])
def test_a_tensor_whose_data_is_set_is_read_from_what_made_its_new_value(mode: str) -> None:
    torch.manual_seed(0)
    model, x = _SwapsData(), torch.randn(2, 4)
    with torch.no_grad() if mode == "no_grad" else contextlib.nullcontext():
        recording = tgr.record(model, x)
    assert torch.equal(recording.output, 2 * model.b(x))  # a's result is not in it
    graph = recording.graph
    ops = {attrs["parent"]: node for node, attrs in nodes_of(graph, "op").items()}
    mul = next(node for node, attrs in nodes_of(graph, "op").items() if attrs["name"] == "mul")
    assert nx.has_path(graph, ops["layer:b#0"], mul)
    assert not nx.has_path(graph, ops["layer:a#0"], mul)

    normalized = tgr.record(_NormalizesThroughData(), x).graph
    ops = {attrs["name"]: node for node, attrs in nodes_of(normalized, "op").items()}
    assert ops["div"] in normalized.predecessors(ops["linear"])
    assert "param:lin.weight" not in normalized.predecessors(ops["linear"])


class _PerSample(nn.Module):
    """A transform inside the forward: ``vmap`` over the batch, ``grad`` of the input, or
    ``jvp`` (forward-mode AD: the output and its derivative along the input)."""

    def __init__(self, transform: str) -> None:
        super().__init__()
        self.transform, self.lin = transform, nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.transform == "vmap":
            return torch.func.vmap(self.lin)(x)
        if self.transform == "jvp":
            value, derivative = torch.func.jvp(self.lin, (x,), (torch.ones_like(x),))
            return value + derivative
        return torch.func.grad(lambda t: self.lin(t).tanh().sum())(x)


@pytest.mark.parametrize("mode", ["grad", "no_grad"])
@pytest.mark.parametrize("transform, last", [("vmap", "linear"), ("grad", "grad"),
                                             ("jvp", "add")])
def test_a_transform_inside_the_forward_joins_its_input_and_output(
        transform: str, last: str, mode: str) -> None:
    # the transform hands its function wrappers of the values, and hands out what its
    # result wraps: new tensor objects, which were drawn as constants from nowhere
    torch.manual_seed(0)
    model, x = _PerSample(transform), torch.randn(2, 4)
    with torch.no_grad() if mode == "no_grad" else contextlib.nullcontext():
        recording = tgr.record(model, x)
    assert torch.equal(recording.output, model(x))
    graph = recording.graph
    roles = {node: attrs.get("role") for node, attrs in nodes_of(graph, "tensor").items()}
    assert "constant" not in roles.values()
    [source] = [node for node, role in roles.items() if role == "input"]
    [output] = [node for node, role in roles.items() if role == "output"]
    [maker] = graph.predecessors(output)
    assert graph.nodes[maker]["name"] == last
    linear = next(node for node, attrs in nodes_of(graph, "op").items()
                  if attrs["name"] == "linear")
    assert nx.has_path(graph, source, linear) and nx.has_path(graph, linear, output)


class _TakesAWeight(nn.Module):
    """``y.data`` set to a parameter no op has read yet, or to the model's input."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source, self.a, self.b = source, nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(x)
        y.data = self.a.weight if self.source == "param" else x
        return y * 2


@pytest.mark.parametrize("source, read", [("param", "param:a.weight"), ("input", "tensor:0@v0")])
def test_data_set_to_a_value_not_read_yet_is_read_from_it(source: str, read: str) -> None:
    graph = tgr.record(_TakesAWeight(source), torch.randn(4, 4)).graph
    mul = next(node for node, attrs in nodes_of(graph, "op").items() if attrs["name"] == "mul")
    assert list(graph.predecessors(mul)) == [read]


def test_a_transform_around_the_model_leaves_its_input_as_the_model_sees_it() -> None:
    # vmap(model)(x): the model's input is the per-sample value; x is from outside
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.Tanh()), torch.randn(5, 4)
    with tgr.Recorder(model) as recorder:
        torch.func.vmap(model)(x)
    roles = {attrs.get("role"): attrs["shape"]
             for attrs in nodes_of(recorder.recording.graph, "tensor").values()}
    assert roles["input"] == (4,) and "constant" not in roles
