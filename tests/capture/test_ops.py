"""Every torch-level call the forward makes is an op, whatever the grad mode, with true edges."""

from __future__ import annotations

import collections
import contextlib

import networkx as nx
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from models import ZOO

GRAD_MODES = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "frozen": contextlib.nullcontext,
}


def _calls_params_ops(graph: nx.DiGraph) -> tuple:
    layers = {n for n, a in graph.nodes(data=True) if a["kind"] == "layer"}
    params = set(nodes_of(graph, "param"))
    ops = collections.defaultdict(list)
    for _, attrs in sorted(nodes_of(graph, "op").items(), key=lambda item: item[1]["seq"]):
        ops[attrs["parent"]].append(attrs["name"])
    return layers, params, dict(ops)


@pytest.mark.parametrize("mode", list(GRAD_MODES))
@pytest.mark.parametrize("name", list(ZOO))
def test_every_grad_mode_records_the_same_calls_params_and_ops(name: str, mode: str) -> None:
    reference = fresh(name)
    reference.model.train()  # eval mode under no_grad takes fused fast paths: other ops
    expected = _calls_params_ops(tgr.record(*reference).graph)
    case = fresh(name)
    case.model.train()
    if mode == "frozen":
        case.model.requires_grad_(False)
    with GRAD_MODES[mode]():
        graph = tgr.record(*case).graph
    tgr.validate(graph)
    assert _calls_params_ops(graph) == expected


class Router(nn.Module):
    """Non-differentiable work: argmax, a comparison, a boolean mask, torch.where and
    integer arithmetic, all on the way to the output."""

    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.score(x).argmax(dim=-1)
        slot = (choice * 2 + 1) // 3
        keep = slot > 0
        picked = torch.where(keep[:, None], x, torch.zeros_like(x))
        return picked[keep].sum(0) + slot.sum()


@pytest.mark.parametrize("grad", [True, False])
def test_non_differentiable_work_is_on_the_path_to_the_output(grad: bool) -> None:
    with torch.set_grad_enabled(grad):
        graph = tgr.record(Router(), torch.randn(5, 4)).graph
    tgr.validate(graph)
    ops = {a["name"]: n for n, a in nodes_of(graph, "op").items()}
    assert {"argmax", "mul", "add", "floordiv", "gt", "where", "getitem", "zeros_like",
            "sum"} <= set(ops)
    output = next(n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "output")
    model_input = next(n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "input")
    for name in ("argmax", "floordiv", "gt", "where", "getitem"):
        assert nx.has_path(graph, model_input, ops[name]) and nx.has_path(graph, ops[name], output)
    assert graph.nodes[ops["argmax"]]["dtype"] == "int64" and graph.nodes[ops["gt"]]["dtype"] == "bool"
    assert graph.nodes[ops["argmax"]]["grad_fn"] is None


def test_op_names_args_and_shapes_read_like_the_source() -> None:
    class Source(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.cat([x, x * 2], dim=1).view(2, 2, -1)
            h = F.softmax(h, dim=-1)
            h[:, 0] = 1.0
            return (1 - h).transpose(1, 2) @ torch.arange(4.0).view(2, 2)

    graph = tgr.record(Source(), torch.randn(2, 4)).graph
    ops = sorted(nodes_of(graph, "op").values(), key=lambda a: a["seq"])
    assert [(a["name"], a["args"]) for a in ops] == [
        ("mul", "2"), ("cat", "dim=1"), ("view", "2, 2, -1"), ("softmax", "dim=-1"),
        ("setitem", "[:, 0]"), ("sub", "1"), ("transpose", "1, 2"), ("arange", "4.0"),
        ("view", "2, 2"), ("matmul", "")]
    assert ops[2]["shape"] == (2, 2, 4) and all(a["dtype"] == "float32" for a in ops)


def test_equal_arguments_written_differently_keep_their_own_text() -> None:
    class Equal(nn.Module):  # 1 == 1.0 == True and 0.0 == -0.0, but each reads differently
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for value in (1, 1.0, True, 0.0, -0.0, 0, False, 1, 1.0, -0.0):
                x = x.add(value)
            for size in ((2, 2), (2.0, 2), torch.Size([2, 2]), [2, 2], (2, 2)):
                x = x.expand(size) if not isinstance(size[0], float) else x.add(size[0])
            return F.leaky_relu(x, negative_slope=1) + F.leaky_relu(x, negative_slope=1.0)

    for _ in range(2):  # a second recording reads the texts the first remembered
        graph = tgr.record(Equal(), torch.randn(2, 2)).graph
        ops = sorted(nodes_of(graph, "op").values(), key=lambda a: a["seq"])
        assert [a["args"] for a in ops] == [
            "1", "1.0", "True", "0.0", "-0.0", "0", "False", "1", "1.0", "-0.0",
            "(2, 2)", "2.0", "(2, 2)", "[2, 2]", "(2, 2)", "negative_slope=1",
            "negative_slope=1.0", ""]


def test_tensor_only_arguments_read_as_no_text_however_many_and_leave_nothing_shared() -> None:
    from torchgraphrec.capture.opnames import NO_KWARGS

    class Arguments(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.randn(3, 3)), nn.Parameter(torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x + x  # tensors only: the records share one tuple per count
            z = torch.block_diag(*[y] * 9)  # nine tensors: past the shared tuples
            by_keyword = F.linear(y, self.weight, bias=self.bias)  # a tensor by keyword
            return z.sum(dim=0)[:3] + torch.cat([y, y]).view(-1)[:3] + by_keyword.sum()

    for _ in range(2):
        graph = tgr.record(Arguments(), torch.randn(3, 3)).graph
        ops = sorted(nodes_of(graph, "op").values(), key=lambda a: a["seq"])
        assert [(a["name"], a["args"]) for a in ops] == [
            ("add", ""), ("block_diag", ""), ("linear", ""), ("sum", "dim=0"), ("getitem", "[:3]"),
            ("cat", ""), ("view", "-1"), ("getitem", "[:3]"), ("add", ""), ("sum", ""), ("add", "")]
        by_keyword = next(n for n, a in nodes_of(graph, "op").items() if a["name"] == "linear")
        assert {"param:weight", "param:bias"} <= set(graph.predecessors(by_keyword))
    # the keyword arguments of the calls given none are one dict, which nothing wrote to
    assert NO_KWARGS == {}


def test_edges_follow_every_tensor_argument_and_in_place_makes_a_version() -> None:
    class Inputs(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = x + 1, x * 2
            both = torch.cat([a, b])
            both.add_(a.sum())
            return both

    graph = tgr.record(Inputs(), torch.randn(2)).graph
    ops = {a["name"]: n for n, a in nodes_of(graph, "op").items()}
    assert {ops["add"], ops["mul"]} <= set(graph.predecessors(ops["cat"]))
    assert set(graph.predecessors(ops["add_"])) == {ops["cat"], ops["sum"]}
    assert nx.is_directed_acyclic_graph(graph)
    output = next(n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "output")
    assert list(graph.predecessors(output)) == [ops["add_"]]


class _Norm(nn.Module):
    """An RMSNorm as Llama's, T5's and Mixtral's begin: ``to`` a dtype the input has already
    hands back the input itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.linear = _Norm(), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.linear(self.norm(x))


def test_a_call_handing_back_its_argument_is_no_op_and_moves_no_edge() -> None:
    # the residual read the norm's `to` as its producer: an edge out of the norm that no
    # data took (x.to(x.dtype) is x, unchanged)
    model = nn.Sequential(nn.Linear(8, 8), _Residual())
    graph = tgr.record(model, torch.randn(2, 8)).graph
    ops = {a["name"]: n for n, a in nodes_of(graph, "op").items()}
    assert "to" not in ops
    residual = next(n for n, a in nodes_of(graph, "op").items()
                    if a["name"] == "add" and a["parent"] == "layer:1#0")
    block_input = graph.nodes["layer:1#0"]["inputs"][0]
    assert block_input in set(graph.predecessors(residual))
    assert "layer:1.norm#0" not in {graph.nodes[p].get("parent")
                                    for p in graph.predecessors(residual)}
    # and inside the norm, pow and mul read its input as it came in
    norm_input = graph.nodes["layer:1.norm#0"]["inputs"][0]
    assert norm_input in set(graph.predecessors(ops["pow"]))


def test_factory_ops_have_no_input_edge() -> None:
    class Factory(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.arange(3) + torch.zeros(3)

    graph = tgr.record(Factory(), torch.randn(3)).graph
    for attrs_id, attrs in nodes_of(graph, "op").items():
        if attrs["name"] in ("arange", "zeros"):
            assert graph.in_degree(attrs_id) == 0


def test_ops_lie_in_their_call_and_edges_in_observation_order() -> None:
    graph = tgr.record(*fresh("gpt2")).graph
    for attrs in nodes_of(graph, "op").values():
        parent = graph.nodes[attrs["parent"]]
        assert parent["t_start_ns"] <= attrs["t_start_ns"] <= attrs["t_end_ns"] <= parent["t_end_ns"]
    edges = sorted(graph.edges(data=True), key=lambda edge: edge[2]["seq"])
    times = [attrs["t_ns"] for *_, attrs in edges]
    assert times == sorted(times)
    seqs = [a["seq"] for _, a in graph.nodes(data=True)] + [a["seq"] for *_, a in edges]
    assert len(seqs) == len(set(seqs))


class Tally(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls[getattr(func, "__name__", repr(func))] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["resnet_like", "gpt2", "inplace"])
def test_a_users_modes_around_record_see_what_they_see_without_it(name: str) -> None:
    plain_case, recorded_case = fresh(name), fresh(name)
    with Tally() as plain_tally, FlopCounterMode(display=False) as plain_flops:
        plain_case.model(*plain_case.args, **plain_case.kwargs)
    with Tally() as tally, FlopCounterMode(display=False) as flops:
        tgr.record(*recorded_case)
    assert tally.calls == plain_tally.calls
    assert flops.get_total_flops() == plain_flops.get_total_flops() > 0
    assert torch._C._len_torch_function_stack() == 0


def test_a_users_mode_sees_the_loss_a_backward_recording_takes_and_nothing_more() -> None:
    # it saw the recorder choose the loss's parts (is_floating_point, requires_grad)
    plain_case, recorded_case = fresh("resnet_like"), fresh("resnet_like")
    with Tally() as plain_tally:
        plain_case.model(*plain_case.args, **plain_case.kwargs).sum().backward()
    with Tally() as tally:
        tgr.record(*recorded_case, backward=True)
    assert tally.calls == plain_tally.calls


def test_keyword_only_inputs_are_the_models_inputs_named_by_parameter() -> None:
    class Add(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
            return self.a(p) + self.b(q)

    graph = tgr.record(Add(), (), {"p": torch.randn(1, 2), "q": torch.randn(1, 2)}).graph
    tgr.validate(graph)
    inputs = {a["name"]: a for a in nodes_of(graph, "tensor").values() if a["role"] == "input"}
    assert set(inputs) == {"p", "q"} and all(a["parent"] is None for a in inputs.values())


def test_a_keyword_tensor_changed_in_place_is_recorded_as_the_call_received_it() -> None:
    class Bumps(nn.Module):
        def forward(self, x: torch.Tensor, *, counter: torch.Tensor) -> torch.Tensor:
            counter.add_(1)
            return x * counter

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Bumps()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            counter = x.sum(dim=0)
            return self.inner(x, counter=counter)

    graph = tgr.record(Outer(), torch.ones(2, 3)).graph
    tgr.validate(graph)
    inner = graph.nodes["layer:inner#0"]
    received = [graph.nodes[t] for t in inner["inputs"]]
    assert [t["version"] for t in received] == [0, 0]  # both as they were at the call
    add_ = next(n for n, a in nodes_of(graph, "op").items() if a["name"] == "add_")
    assert set(graph.predecessors(add_)) == {inner["inputs"][1]}


def test_model_outputs_are_named_by_their_path() -> None:
    graph = tgr.record(*fresh("structured_outputs")).graph
    names = {a["name"] for a in nodes_of(graph, "tensor").values() if a["role"] == "output"}
    assert {"output[0][0]", "output[1]['hidden']", "output[1]['pair'][0]",
            "output[2].logits"} <= names


@pytest.mark.parametrize("ops, kinds", [("autograd", {"layer", "tensor", "param", "op"}),
                                        (None, {"layer", "tensor"})])
def test_the_other_op_views(ops: object, kinds: set) -> None:
    graph = tgr.record(*fresh("resnet_like"), ops=ops).graph
    tgr.validate(graph)
    assert {a["kind"] for _, a in graph.nodes(data=True)} == kinds
    assert graph.graph["ops"] == (ops or "none")
    if ops == "autograd":
        assert "convolution" in {a["name"] for a in nodes_of(graph, "op").values()}
    else:  # calls and the tensors between them, joined by what each call received and made
        first = graph.nodes["layer:stem.0#0"]
        assert set(graph.predecessors("layer:stem.0#0")) == set(first["inputs"])
        assert set(graph.successors("layer:stem.0#0")) == set(first["outputs"])


def test_an_unknown_op_view_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown ops: 'aten' \(must be one of \['torch', 'autograd', None\]\)"):
        tgr.record(nn.Linear(2, 2), torch.randn(1, 2), ops="aten")
    with pytest.raises(ValueError, match=r"unknown ops: 'all'"):
        tgr.Recorder(nn.Linear(2, 2), ops="all")


def test_under_no_grad_frozen_weights_show_their_params_and_ops() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    with torch.no_grad():
        recording = tgr.record(model, torch.randn(4, 8))
    assert repr(recording) == "<Recording model=Sequential layers=4 ops=3 tensors=4 params=4>"


def test_a_buffer_changed_in_place_through_a_view_is_read_from_the_change() -> None:
    class Cache(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("cache", torch.zeros(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.cache[1:3].copy_(x)  # through a view: the buffer's own version moves too
            return self.cache * 2

    with torch.no_grad():
        graph = tgr.record(Cache(), torch.ones(2)).graph
    ops = {attrs["name"]: node for node, attrs in nodes_of(graph, "op").items()}
    assert list(graph.predecessors(ops["mul"])) == [ops["copy_"]]
    assert list(graph.predecessors(ops["getitem"])) == ["param:cache"]


class _WrittenThroughViews(nn.Module):
    """In-place writes through views of one tensor (as BigBird's ``view[:, :, 1].scatter_``),
    read back through the tensor and through a view taken before the writes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = x.view(2, 3, 4)
        earlier = base[1]
        base[:, 1].mul_(2.0)
        base[0, 0].add_(1.0)
        return base.sum(-1) + earlier.sum(-1)


@pytest.mark.parametrize("mode", list(GRAD_MODES))
def test_writes_through_views_are_read_from_the_last_write_in_every_grad_mode(
        mode: str) -> None:
    # inference tensors keep no version counter and their views no base: under
    # inference mode the reads were wired to the view op, past both writes
    with GRAD_MODES[mode]():
        graph = tgr.record(_WrittenThroughViews(), torch.randn(2, 12)).graph
    tgr.validate(graph)
    ops = {attrs["name"]: node for node, attrs in nodes_of(graph, "op").items()}
    sums = sorted((n for n, a in nodes_of(graph, "op").items() if a["name"] == "sum"),
                  key=lambda node: graph.nodes[node]["seq"])
    for read in sums:  # the tensor and the earlier view: both from the last write
        assert list(graph.predecessors(read)) == [ops["add_"]], read
    assert nx.has_path(graph, ops["mul_"], ops["add_"])


class _Doubler(nn.Module):
    def forward(self, cache: torch.Tensor) -> torch.Tensor:
        return cache * 2


class _WritesThenHandsOn(nn.Module):
    """Writes into its input through a view, then hands the input to a submodule: the input
    crosses a call boundary before the write and after it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _Doubler()

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache[:, 1].mul_(x)
        return self.inner(cache)


@pytest.mark.parametrize("mode", list(GRAD_MODES))
def test_a_tensor_written_through_a_view_crosses_a_boundary_as_a_new_value(mode: str) -> None:
    # under inference mode its value after the write took the input's node id again
    # (inference tensors' ids cannot tell values apart by version): a CaptureError
    with GRAD_MODES[mode]():
        graph = tgr.record(_WritesThenHandsOn(), (torch.randn(3), torch.ones(2, 3, 3))).graph
    tgr.validate(graph)
    inner = graph.nodes["layer:inner#0"]
    (received,) = inner["inputs"]
    (writer,) = graph.predecessors(received)
    assert graph.nodes[writer]["name"] == "mul_"
    assert received not in graph.nodes["layer:#0"]["inputs"]


class _Flagged(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.requires_grad_(False)  # changes a flag, not the values: no op in any grad mode
        return y + 1


@pytest.mark.parametrize("mode", list(GRAD_MODES))
def test_an_in_place_method_that_changes_no_values_is_no_op(mode: str) -> None:
    with GRAD_MODES[mode]():
        graph = tgr.record(_Flagged(), torch.randn(3)).graph
    ops = nodes_of(graph, "op")
    assert sorted(attrs["name"] for attrs in ops.values()) == ["add", "mul"]
    (add,) = (node for node, attrs in ops.items() if attrs["name"] == "add")
    assert [graph.nodes[p]["name"] for p in graph.predecessors(add)] == ["mul"]


class _WritesTwoOuts(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.empty(3), torch.empty(3, dtype=torch.long)
        earlier = values[:2]  # a view taken before the write
        torch.max(x, 0, out=(values, indices))
        return earlier * 2, indices + 1


@pytest.mark.parametrize("mode", list(GRAD_MODES))
def test_every_tensor_of_an_out_tuple_is_read_from_the_op_that_wrote_it(mode: str) -> None:
    # under inference mode only a single out= tensor counted as written: the view taken
    # before the write stayed wired to the getitem that made it
    with GRAD_MODES[mode]():
        graph = tgr.record(_WritesTwoOuts(), torch.randn(4, 3)).graph
    tgr.validate(graph)
    ops = nodes_of(graph, "op")
    (writer,) = (node for node, attrs in ops.items() if attrs["name"] == "max")
    for reader in ("mul", "add"):
        (node,) = (node for node, attrs in ops.items() if attrs["name"] == reader)
        assert list(graph.predecessors(node)) == [writer], reader


class _PicksColumns(nn.Module):
    def forward(self, y: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        first, last = scores.argmax(), scores.argmin()
        return y[:, (first, last)] + y[((first,), (last,))].sum()


def test_index_tensors_nested_in_an_ops_arguments_feed_it() -> None:
    # only one level into lists and tuples was read: y[:, (i, j)] had no edge from i or j
    graph = tgr.record(_PicksColumns(), (torch.randn(3, 4), torch.randn(4))).graph
    ops = nodes_of(graph, "op")
    names = {node: attrs["name"] for node, attrs in ops.items()}
    getitems = sorted((n for n in ops if names[n] == "getitem"),
                      key=lambda node: graph.nodes[node]["seq"])
    assert [ops[n]["args"] for n in getitems] == ["[:, (t, t)]", "[(t,), (t,)]"]
    for getitem in getitems:
        assert {names.get(p) for p in graph.predecessors(getitem)} == {"argmax", "argmin", None}


class _WritesThroughData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y.data.mul_(2)  # .data keeps a version counter of its own: y's does not move
        return y + 1


@pytest.mark.parametrize("mode", list(GRAD_MODES))
def test_a_write_through_data_is_what_the_tensor_is_read_from(mode: str) -> None:
    # outside inference mode the add was wired to linear's value from before the write
    with GRAD_MODES[mode]():
        graph = tgr.record(_WritesThroughData(), torch.randn(3, 4)).graph
    tgr.validate(graph)
    ops = nodes_of(graph, "op")
    names = {node: attrs["name"] for node, attrs in ops.items()}
    (add,) = (node for node, name in names.items() if name == "add")
    assert [names.get(p) for p in graph.predecessors(add)] == ["mul_"]
    (write,) = graph.predecessors(add)
    assert nx.has_path(graph, next(n for n, name in names.items() if name == "linear"), write)


class _WritesThroughDetached(nn.Module):
    """``detach()`` shares its source's memory and version counter, but is no view of it
    (no ``_base``): a write through one is a new value of the other."""

    def __init__(self, way: str) -> None:
        super().__init__()
        self.fc, self.way = nn.Linear(4, 4), way

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.way == "input":
            x.detach().mul_(2)
            return x + 1
        y = self.fc(x)
        detached = y.detach()
        if self.way == "through the detached":
            detached[:, 0].add_(1)  # through a view of it, too
            return y * 2
        y.add_(1)
        return detached * 2


@pytest.mark.parametrize("mode", list(GRAD_MODES))
@pytest.mark.parametrize("way", ["through the detached", "read from the detached", "input"])
def test_a_write_through_a_detached_tensor_is_what_its_source_is_read_from(
        mode: str, way: str) -> None:
    # the last op read a made-up constant with no producer: the writer was filed under the
    # tensor written, found by the other only through a _base
    x = torch.randn(3, 4)
    with GRAD_MODES[mode]():
        graph = tgr.record(_WritesThroughDetached(way), x.clone()).graph
    tgr.validate(graph)
    ops = nodes_of(graph, "op")
    last = max(ops, key=lambda node: ops[node]["seq"])
    writes = {"input": "mul_", "through the detached": "add_", "read from the detached": "add_"}
    assert [ops[p]["name"] for p in graph.predecessors(last) if p in ops] == [writes[way]]
    assert not [n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "constant"]
    first = "detach" if way == "input" else "linear"
    (start,) = (n for n, a in ops.items() if a["name"] == first)
    assert nx.has_path(graph, start, last)


def test_what_the_recorder_keeps_of_data_reads_does_not_grow_with_the_forwards() -> None:
    model = _WritesThroughData()
    with tgr.Recorder(model) as rec:
        for _ in range(5):
            model(torch.randn(3, 4))
        # each forward read one .data, which died with it
        assert len(rec._capture.state.values.data_of) == 1


def test_what_the_recorder_keeps_of_detached_tensors_does_not_grow_with_the_forwards() -> None:
    model = _WritesThroughDetached("through the detached")
    with tgr.Recorder(model) as rec:
        for _ in range(5):
            model(torch.randn(3, 4))
        # each forward detached one tensor, which died with it
        assert len(rec._capture.state.values.detached) == 1
