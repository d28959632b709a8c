"""The backward's collectives on a one-rank gloo group in this process (two ranks: tests/ranks)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn

import torchgraphrec as tgr
from torchgraphrec import _torch
from torchgraphrec.capture import autograd
from torchgraphrec.capture.bwdcoll import DISPATCHED
from helpers import one_rank_group


@pytest.fixture
def one_rank(tmp_path) -> Iterator[None]:
    if not dist.is_available():
        pytest.skip("this torch is built without torch.distributed")
    with one_rank_group(tmp_path):
        yield


class Summed(nn.Module):
    """A Linear whose output is all-reduced in the forward (a collective before the backward's)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        total = y.detach().clone()
        dist.all_reduce(total)
        return y * 2 + total


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 4), Summed()))


def _scoped() -> None:
    if not _torch.node_scoped_dispatch_modes():
        pytest.skip("this torch keeps a mode pushed in a backward hook")


def _train(model: nn.Module, record: bool, **options: Any) -> tuple[list, Any]:
    """Two steps; the gradients of each and the recorder, where one recorded."""
    grads = []
    rec = tgr.Recorder(model, **options) if record else None
    if rec is not None:
        rec.__enter__()
    try:
        for step in range(2):
            torch.manual_seed(step)
            model(torch.randn(3, 4)).sum().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            for p in model.parameters():
                p.grad = None
    finally:
        if rec is not None:
            rec.__exit__(None, None, None)
    return grads, rec


def _collectives(graph: Any) -> list[dict]:
    return [attrs for _, attrs in sorted(graph.nodes(data=True), key=lambda i: i[1]["seq"])
            if "collective" in attrs]


def test_every_dispatched_name_is_a_c10d_or_functional_op() -> None:
    namespaces = {name.partition("::")[0] for name in DISPATCHED}
    assert namespaces == {"c10d", "_c10d_functional"}
    found = [name for name in DISPATCHED
             if hasattr(getattr(torch.ops, name.partition("::")[0]), name.partition("::")[2])]
    assert "c10d::allreduce_" in found and len(found) >= len(DISPATCHED) - 8


def test_ddp_all_reduces_are_backward_op_nodes_and_gradients_stay_the_same(one_rank) -> None:
    _scoped()
    plain, _ = _train(_model(), False)
    recorded, rec = _train(_model(), True)
    assert all(torch.equal(a, b) for x, y in zip(plain, recorded) for a, b in zip(x, y))
    backward = [attrs for attrs in _collectives(rec.graph) if attrs["phase"] == "backward"]
    # whatever DDP's buckets: each step all-reduces every gradient once
    size = sum(p.numel() * p.element_size() for p in _model().parameters())
    assert sum(attrs["comm_bytes"] for attrs in backward) == 2 * size
    # DDP's work, drawn in the DDP call whose backward ran it
    assert {(a["collective"], a["label"], a["group_ranks"], a["parent"]) for a in backward
            } == {("all_reduce", "all_reduce (backward)", (0,), f"layer:#{k}") for k in (0, 1)}
    assert "backward_collectives" not in rec.graph.graph
    assert tgr.validate(rec.graph) is None


@pytest.mark.needs("collectives_dispatched")
def test_coll_seq_numbers_forward_and_backward_collectives_in_the_order_they_ran(
        one_rank) -> None:
    _scoped()
    found = _collectives(_train(_model(), True)[1].graph)
    phases = [attrs["phase"] for attrs in found]
    # each step: the forward's all-reduce, then DDP's bucket all-reduce(s); in the second,
    # first the broadcasts of DDP's bucket rebuild (C++, in the forward)
    forward = [attrs["collective"] for attrs in found if attrs["phase"] == "forward"]
    assert phases[0] == "forward" and forward.count("all_reduce") == 2
    assert set(forward) == {"all_reduce", "broadcast"}
    assert phases[1] == "backward" and phases[-1] == "backward"
    assert [attrs["coll_seq"] for attrs in found] == list(range(len(found)))


def test_a_backward_that_raises_leaves_no_mode_behind(one_rank) -> None:
    model = _model()
    with tgr.Recorder(model) as rec:
        out = model(torch.randn(3, 4))
        out.register_hook(lambda grad: (_ for _ in ()).throw(ValueError("user hook")))
        with pytest.raises(ValueError, match="user hook"):
            out.sum().backward()
        assert _torch.dispatch_mode_depth() == 0
        model(torch.randn(3, 4)).sum().backward()  # the next step runs as ever
    assert _torch.dispatch_mode_depth() == 0
    assert rec.graph.graph["rank"] == 0


@pytest.mark.parametrize("ops", [None, "autograd"])
def test_without_ops_the_graph_says_the_backward_collectives_were_not_seen(
        one_rank, ops: Any) -> None:
    _, rec = _train(_model(), True, ops=ops)
    assert rec.graph.graph["backward_collectives"].startswith(f"not seen: ops={ops or 'none'!r}")
    assert not [a for a in _collectives(rec.graph) if a.get("phase") == "backward"]


class Chain(nn.Module):
    """Twenty multiplications one after another: one autograd chain."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(20):
            x = x * 2
        return x


def test_past_the_chain_limit_the_graph_says_the_backward_was_not_watched(
        one_rank, monkeypatch: pytest.MonkeyPatch) -> None:
    _scoped()
    monkeypatch.setattr(autograd, "MAX_CHAIN", 5)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(3, 3), Chain()))
    with pytest.warns(UserWarning, match="no grad_fn names past that depth"):
        graph = tgr.record(model, torch.randn(2, 3), backward=True).graph
    assert graph.graph["backward_collectives"].startswith("not seen: a forward chained")
    assert not [a for a in _collectives(graph) if a.get("phase") == "backward"]


_SAID = ("name", "collective", "group_name", "group_ranks", "comm_bytes", "phase", "coll_seq",
         "parent")


def _said(graph: Any) -> list[tuple]:
    return [tuple(attrs.get(key) for key in _SAID) for attrs in _collectives(graph)]


class FunctionallySummed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed import _functional_collectives as functional

        return functional.all_reduce(x, "sum", dist.group.WORLD)


def test_a_graph_read_after_the_group_is_destroyed_says_what_one_read_before_does(
        tmp_path) -> None:
    """The usual end of a job: destroy_process_group(), then read the recording."""
    if not dist.is_available():
        pytest.skip("this torch is built without torch.distributed")
    recorders = []
    with one_rank_group(tmp_path):
        for _ in range(2):
            model = nn.Sequential(_model(), FunctionallySummed())
            with tgr.Recorder(model, backward=True) as rec:
                model(torch.ones(3, 4)).sum().backward()
            recorders.append(rec)
        before = _said(recorders[0].graph)
    after = _said(recorders[1].graph)
    assert after == before
    forward = [said for said in before if said[5] == "forward"]
    assert len(forward) >= 2 and all(said[3] == (0,) and said[4] > 0 for said in forward)
    assert [said[6] for said in before] == list(range(len(before)))


def test_a_group_initialized_inside_the_block_stamps_the_graph_and_says_what_was_not_seen(
        tmp_path) -> None:
    if not dist.is_available():
        pytest.skip("this torch is built without torch.distributed")
    model, group = nn.Linear(4, 4), one_rank_group(tmp_path)
    try:
        with tgr.Recorder(model, backward=True, probes=[tgr.probe("output", keep="rms")]) as rec:
            group.__enter__()
            out = model(torch.ones(2, 4))
            dist.all_reduce(out.detach())
            out.sum().backward()
            stamps = {key: rec.graph.graph.get(key) for key in ("rank", "world_size")}
    finally:
        group.__exit__(None, None, None)
    assert stamps == {"rank": None, "world_size": None}  # read before the block ended
    graph = rec.graph
    assert (graph.graph["rank"], graph.graph["world_size"]) == (0, 1)
    assert set(rec.frame()["rank"]) == {0}  # the probes' rows are the rank's too
    assert graph.graph["backward_collectives"].startswith(
        "not seen: torch.distributed was initialized inside the recording's block")
    assert tgr.validate(graph) is None


def test_graph_first_keeps_only_the_first_steps_backward_collectives(one_rank) -> None:
    """DDP keeps its parameters' accumulators, hooked in the first step: the later steps'
    backwards, of forwards not recorded, run them too."""
    _scoped()
    model = _model()
    with tgr.Recorder(model, graph="first") as rec:
        for step in range(3):
            model(torch.randn(3, 4)).sum().backward()
    backward = [a for a in _collectives(rec.graph) if a["phase"] == "backward"]
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(a["comm_bytes"] for a in backward) == size  # one step's all-reduce
    assert {a["parent"] for a in backward} == {"layer:#0"}


class OnItsOwnGroup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.group: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x).detach().clone()
        dist.all_reduce(y, group=self.group)
        return y


def test_a_group_destroyed_inside_the_block_keeps_its_collectives_attributes(
        one_rank) -> None:
    """A subgroup made and destroyed between two steps: the block ends as ever, and the
    graph still says the group of the collective that ran on it."""
    model = OnItsOwnGroup()
    with tgr.Recorder(model) as rec:
        model.group = dist.new_group([0])
        name = str(model.group.group_name)
        model(torch.ones(2, 4))
        dist.destroy_process_group(model.group)
        model.group = None
        model(torch.ones(2, 4))
    found = [(a["group_name"], a["group_ranks"], a["coll_seq"]) for a in _collectives(rec.graph)]
    world = str(dist.group.WORLD.group_name)
    assert found == [(name, (0,), 0), (world, (0,), 0)]
