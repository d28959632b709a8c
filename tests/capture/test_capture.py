"""The capture internals' own promises: structures, placement, descriptions, graph hand-off."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from typing import Any

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import hook_state, nodes_of
from models import Raising, make, resnet_like
from torchgraphrec.capture import autograd
from torchgraphrec.capture.autograd import place
from torchgraphrec.capture.naming import Describer, Namer
from torchgraphrec.capture.structures import flatten_tensors
from torchgraphrec.capture.tables import ModuleTable, _named_modules


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    rest: list


def test_flatten_keeps_depth_first_order_through_every_container() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    nested = ({"x": a, "skip": None}, [Pair(b, [c, "text"])], (d,))
    assert [t.item() for t in flatten_tensors(nested)] == [0.0, 1.0, 2.0, 3.0]


def test_flatten_reads_dict_subclasses_whose_values_are_a_generator() -> None:
    class Lazy(dict):
        def values(self):  # type: ignore[override]
            return (value for value in super().values())

    a, b = torch.zeros(1), torch.ones(1)
    assert flatten_tensors(Lazy(x=a, y=b)) == [a, b]


def test_flatten_visits_a_self_containing_list_once_and_leaves_generators_alone() -> None:
    x = torch.zeros(1)
    loop: list = [x]
    loop.append(loop)
    generator = (torch.ones(1) for _ in range(3))
    assert flatten_tensors((loop, generator)) == [x]
    assert len(list(generator)) == 3


def test_place_gives_ties_to_the_later_breakpoint_and_holds_after_the_last() -> None:
    breaks = [(0, 0, 100), (4, 1, 200), (4, 0, 300), (8, 2, 700)]
    # between two breakpoints, the numbers in [start, stop) at (i + 1) / (stop - start + 1)
    # of the way: strictly after the one before and before the next
    assert place(breaks, [0, 3, 4, 7, 8, 12]) == [
        (0, 120), (0, 180), (0, 380), (0, 620), (2, 700), (2, 700)]


def test_describer_shares_conversions_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Describer, "_shapes", {})
    monkeypatch.setattr(Describer, "LIMIT", 2)
    x = torch.zeros(2, 3)
    first, again = Describer().shape(x.shape), Describer().shape(x.shape)
    assert first == (2, 3) and first is again
    assert Describer().name(x.dtype) == "float32" and Describer().name(x.device) == "cpu"
    for size in range(1, 6):
        Describer().shape(torch.Size([size]))
    assert len(Describer._shapes) <= 2


def test_table_numbers_modules_as_named_modules_does() -> None:
    shared = nn.Linear(2, 2)
    model = nn.Sequential(nn.Sequential(shared, nn.ReLU()), shared, nn.Linear(2, 1))
    table = ModuleTable(model)
    assert table.qualnames == [name for name, _ in model.named_modules()]
    assert table.tensor_ids[id(shared.weight)] == "param:0.0.weight"
    assert table.module_by_qualname("2") == 4 and table.module_by_qualname("nope") is None


def test_the_table_holds_what_it_named_while_the_model_replaces_it() -> None:
    # the table knows tensors by id(): a buffer the model replaced was freed, and a new
    # tensor at its address was read as that buffer (on torch 2.4, a second forward's input
    # was wired to the running sum's first value)
    model = nn.BatchNorm1d(2)
    table = ModuleTable(model)
    first = weakref.ref(model.running_mean)
    model._buffers["running_mean"] = torch.zeros(2)  # no registration hook: replaced
    gc.collect()
    assert first() is not None and table.tensor_ids[id(first())] == "param:running_mean"


def test_a_wide_walk_past_the_chain_limit_is_measured_not_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autograd, "MAX_CHAIN", 5)

    class Wide(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.stack([x * i for i in range(20)]).sum()

    graph = tgr.record(Wide(), torch.randn(3, requires_grad=True), ops="autograd").graph
    assert len(nodes_of(graph, "op")) == 22


class Chain(nn.Module):
    """Twenty multiplications one after another: one autograd chain."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(20):
            x = x * 2
        return x


def test_a_chain_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autograd, "MAX_CHAIN", 5)

    with pytest.raises(tgr.CaptureError, match="chains more than 5 autograd ops"):
        tgr.record(Chain(), torch.randn(3, requires_grad=True), ops="autograd")


def test_past_the_chain_limit_torch_ops_record_without_touching_autograd_nodes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autograd, "MAX_CHAIN", 5)

    with pytest.warns(UserWarning, match="no grad_fn names past that depth"):
        graph = tgr.record(Chain(), torch.randn(3, requires_grad=True)).graph
    grad_fns = [a["grad_fn"] for a in sorted(nodes_of(graph, "op").values(), key=lambda a: a["seq"])]
    assert len(grad_fns) == 20
    assert grad_fns[:5] == ["MulBackward0"] * 5 and grad_fns[5:] == [None] * 15


def test_a_graph_handed_out_never_changes_when_the_recorder_records_on() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    with tgr.Recorder(model) as rec:
        model(torch.randn(2, 3))
        early = rec.graph
        early.nodes["layer:#0"]["mine"] = True
        model(torch.randn(2, 3))
        later = rec.graph
    assert len(early) < len(later)
    assert "mine" not in later.nodes["layer:#0"]
    assert later.nodes["layer:#1"]["call_index"] == 1


def test_the_graph_read_inside_a_forward_shows_the_forwards_finished_so_far() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    seen: list = []
    with tgr.Recorder(model) as rec:
        model(torch.randn(2, 3))
        handle = model[1].register_forward_hook(lambda *_: seen.append(rec.graph))
        try:
            model(torch.randn(2, 3))
        finally:
            handle.remove()
        whole = rec.graph
    tgr.validate(seen[0])
    tgr.validate(whole)
    assert {a["call_index"] for _, a in seen[0].nodes(data=True) if a["kind"] == "layer"} == {0}
    assert {a["call_index"] for _, a in whole.nodes(data=True) if a["kind"] == "layer"} == {0, 1}


def test_num_params_counts_nested_parameters_once_each() -> None:
    inner = nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.Linear(4, 2)))
    model = nn.Sequential(inner, nn.ReLU(), nn.Linear(2, 3))
    model[2].requires_grad_(False)
    model[0][0].half()
    table = ModuleTable(model)
    counts, sizes, trainable = table.param_totals()
    assert counts == [sum(p.numel() for p in module.parameters()) for module in table.modules]
    assert sizes == [sum(p.numel() * p.element_size() for p in module.parameters())
                     for module in table.modules]
    assert trainable == [sum(p.numel() for p in module.parameters() if p.requires_grad)
                         for module in table.modules]
    assert counts[0] == 16 + 10 + 9
    assert sizes[0] == 2 * 16 + 4 * (10 + 9) and trainable[0] == 16 + 10

    model[2].bias = inner[0].bias  # tied: one parameter under two names counts once
    assert ModuleTable(model).param_totals()[0][0] == 16 + 10 + 6


class _OwnNamedModules(nn.Sequential):
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True):  # type: ignore[no-untyped-def]
        yield prefix + "custom", self


def _shared_and_empty() -> nn.Module:
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.Sequential(nn.ReLU(), shared), nn.ModuleDict({"a": shared}))
    model.register_module("empty", None)
    model.add_module("again", model[1])
    return model


@pytest.mark.parametrize("build", [
    _shared_and_empty,
    lambda: nn.Sequential(nn.Linear(2, 2), _OwnNamedModules(nn.ReLU())),
    lambda: _OwnNamedModules(nn.ReLU()),
    lambda: make("transformer_encoder").model,
    lambda: resnet_like().model,
])
def test_the_module_table_lists_modules_as_named_modules_does(build: Any) -> None:
    model = build()
    found = _named_modules(model)
    assert [(name, id(module)) for name, module, _ in found] == \
        [(name, id(module)) for name, module in model.named_modules()]
    # each one's parent is the module its qualname's prefix names
    positions = {name: position for position, (name, _, _) in enumerate(found)}
    assert [parent for _, _, parent in found] == \
        [positions.get(name.rpartition(".")[0], -1) if name else -1 for name, _, _ in found]
    table = ModuleTable(model)
    assert table.qualnames == [name for name, _ in model.named_modules()]


@pytest.fixture
def broken_describe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorder bug in the pass that names the records after a forward."""
    def broken(self: Namer) -> None:
        raise KeyError("describing went wrong")

    monkeypatch.setattr(Namer, "name_pending", broken)


@pytest.mark.usefixtures("broken_describe")
def test_a_recorder_bug_after_the_forward_is_reported_and_leaves_nothing_behind() -> None:
    model = nn.Sequential(nn.Linear(3, 3))
    before = hook_state(model)
    with pytest.raises(tgr.CaptureError, match="describing went wrong"):
        tgr.record(model, torch.randn(2, 3))
    assert hook_state(model) == before


@pytest.mark.usefixtures("broken_describe")
def test_a_recorder_bug_never_masks_the_users_exception() -> None:
    model = Raising()
    before = hook_state(model)
    with pytest.raises(ValueError, match="bad input shape"):
        tgr.record(model, torch.randn(2, 3))
    assert hook_state(model) == before


def test_lazy_modules_record_and_count_their_materialized_parameters() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    graph = tgr.record(model, torch.randn(2, 3)).graph
    assert graph.nodes["layer:#0"]["num_params"] == 3 * 4 + 4
    assert graph.nodes["param:0.weight"]["shape"] == (4, 3)


def test_params_are_described_as_the_forward_used_them() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    with tgr.Recorder(model) as rec:
        model(torch.randn(1, 3))
    model.double().requires_grad_(False)
    attrs = rec.graph.nodes["param:0.weight"]
    assert (attrs["dtype"], attrs["requires_grad"]) == ("float32", True)


class _Interrupted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.a(x)
        raise KeyboardInterrupt("stopped")  # torch runs no always_call hook for it


def test_a_forward_interrupted_without_hooks_shows_once_its_frames_are_gone() -> None:
    model = _Interrupted()
    with tgr.Recorder(model) as rec:
        with pytest.raises(KeyboardInterrupt, match="stopped") as caught:
            model(torch.randn(2, 3))
        assert len(rec.graph) == 0  # the exception kept holds the call's frames: still open
        del caught
        assert {"layer:#0", "layer:a#0"} <= set(rec.graph)  # they went: it ended there


def test_a_forward_interrupted_without_hooks_whose_frames_are_kept_shows_as_the_block_ends(
        ) -> None:
    model, kept = _Interrupted(), []
    with tgr.Recorder(model) as rec:
        try:
            model(torch.randn(2, 3))
        except KeyboardInterrupt as interrupt:
            kept.append(interrupt)
        assert len(rec.graph) == 0
    assert {"layer:#0", "layer:a#0"} <= set(rec.graph)


class _Stop(BaseException):
    """Not an ``Exception``: torch runs no ``always_call`` hook when it passes."""


@pytest.mark.parametrize("cut_short_by", [KeyboardInterrupt, _Stop])
def test_a_forward_cut_short_inside_the_block_ends_where_the_next_one_starts(
        cut_short_by: type) -> None:
    from torch.overrides import _get_current_function_mode_stack

    class Stopping(nn.Module):
        fire = True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.fire:
                raise cut_short_by("stopped")
            return x

    model = nn.Sequential(nn.Linear(3, 3), Stopping(), nn.Linear(3, 2))
    x = torch.randn(2, 3)
    model[1].fire = False
    expected = model(x)
    with tgr.Recorder(model) as rec:
        model[1].fire = True
        with pytest.raises(cut_short_by, match="stopped"):
            model(x)
        model[1].fire = False
        output = model(x)
        after = len(_get_current_function_mode_stack()), gc.isenabled()
    assert torch.equal(output, expected)
    assert after == (0, True)  # the second forward ended as usual: nothing left pushed
    layers = nodes_of(rec.graph, "layer")
    assert (layers["layer:#0"]["parent"], layers["layer:#1"]["parent"]) == (None, None)
    assert layers["layer:#1"]["depth"] == 0 and layers["layer:2#0"]["parent"] == "layer:#1"
    assert layers["layer:1#0"]["parent"] == "layer:#0"  # the cut-short call, in its forward
    ops = [a for a in nodes_of(rec.graph, "op").values() if a["name"] == "linear"]
    assert sorted(a["parent"] for a in ops) == ["layer:0#0", "layer:0#1", "layer:2#0"]


def test_a_module_called_from_outside_its_parent_stays_in_the_running_forward() -> None:
    class Borrowing(nn.Module):
        def __init__(self, lender: nn.Module) -> None:
            super().__init__()
            self.inner = nn.Linear(3, 3)
            self.lender = [lender]  # not a submodule: its module is called from here

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lender[0].shared(self.inner(x))

    class Lender(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = nn.Linear(3, 3)
            self.block = Borrowing(self)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(x)

    model = Lender()
    recording = tgr.record(model, torch.randn(2, 3))
    layers = nodes_of(recording.graph, "layer")
    assert set(layers) == {"layer:#0", "layer:block#0", "layer:block.inner#0", "layer:shared#0"}
    assert layers["layer:shared#0"]["parent"] == "layer:block#0"  # where it was called
    assert layers["layer:block#0"]["parent"] == "layer:#0"


def test_the_recording_is_rebuilt_after_a_second_backward_of_the_same_graph() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    with tgr.Recorder(model) as rec:
        loss = model(torch.randn(2, 3)).sum()
        loss.backward(retain_graph=True)
        first = rec.graph.nodes["op:linear#0"]["t_backward_end_ns"]
        loss.backward()
        second = rec.graph.nodes["op:linear#0"]["t_backward_end_ns"]
    assert second > first


def test_probes_on_lazy_modules_wait_for_their_parameters() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    probes = [tgr.probe("param_grad", keep="l2"), tgr.probe("param_update", keep="l2")]
    optimizer = None
    with tgr.Recorder(model, probes=probes) as rec:
        for _ in range(2):
            model(torch.randn(2, 3)).sum().backward()
            optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
            optimizer.step()
            optimizer.zero_grad()
            rec.step()
    frame = rec.frame()
    assert set(frame[frame.site == "param_grad"].path) == {"weight", "bias"}
    updates = frame[frame.site == "param_update"]  # snapshots taken once materialized
    assert sorted(zip(updates.step, updates.path)) == [
        (0, "bias"), (0, "weight"), (1, "bias"), (1, "weight")]


def test_the_graph_fill_relies_only_on_networkx_adjacency_it_pins() -> None:
    import networkx as nx

    from torchgraphrec.capture.build import _fill
    from torchgraphrec.capture.events import Events

    graph = nx.DiGraph()
    events = Events()
    events.edges = [("a", "b", {"kind": "flow", "seq": 2, "t_ns": 0})]
    _fill(graph, [("a", {"x": 1}), ("b", {"x": 2})], events.edges, share=False)
    reference = nx.DiGraph()
    reference.add_nodes_from([("a", {"x": 1}), ("b", {"x": 2})])
    reference.add_edge("a", "b", kind="flow", seq=2, t_ns=0)
    assert nx.utils.graphs_equal(graph, reference)
    assert list(graph.successors("a")) == ["b"] and list(graph.predecessors("b")) == ["a"]
    graph.add_edge("b", "c")  # still an ordinary DiGraph afterwards
    assert graph.in_degree("c") == 1 and nx.is_directed_acyclic_graph(graph)
