"""Two gloo ranks with torch's flight recorder on: the forward's collectives no torch-level
call shows (``barrier``, what C++ issues) as op nodes, each once."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import torchgraphrec as tgr
from torchgraphrec import _torch
from ranks.harness import Rank, flight_entries, scenario

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)
WITH_FLIGHT_RECORDER = True
_KEYS = ("collective", "phase", "coll_seq", "comm_bytes", "group_name", "group_ranks",
         "parent", "label")


class _C10dCounter(_torch.TorchDispatchMode):
    """An independent observer: counts the ``c10d`` ops the dispatcher runs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Any = None) -> Any:
        if func.namespace == "c10d":
            self.seen.append(func._opname)
        return func(*args, **(kwargs or {}))


def _collectives(graph: Any) -> list[dict]:
    return [{key: attrs.get(key) for key in _KEYS}
            for _, attrs in sorted(graph.nodes(data=True), key=lambda item: item[1]["seq"])
            if "collective" in attrs]


class _Barrier(nn.Module):
    """A forward that waits for every rank, then all-reduces through the process group's
    own method (C++, no torch function) and through ``dist.all_reduce``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist.barrier()
        y = self.linear(x)
        direct = y.detach().clone()
        dist.group.WORLD.allreduce([direct]).wait()
        dist.all_reduce(y)
        return y + direct


def _run_barrier(record: bool) -> dict:
    model = _Barrier()
    x = torch.arange(8.0).reshape(2, 4)
    before = len(flight_entries())
    if record:
        with tgr.Recorder(model) as rec:
            out = model(x)
        graph, dot = rec.graph, rec.recording.to_dot()
    else:
        counter = _C10dCounter()
        with counter:
            out = model(x)
        graph, dot = None, ""
    logged = [entry["profiling_name"] for entry in flight_entries()[before:]]
    return {"out": out.detach(), "logged": logged,
            "nodes": _collectives(graph) if graph is not None else [],
            "seen": [] if record else counter.seen,
            "depths": (_torch.dispatch_mode_depth(), _torch.function_mode_depth()),
            "dot": dot}


@on_ranks
def barrier(ctx: Rank) -> dict:
    plain, recorded = _run_barrier(False), _run_barrier(True)
    recorded["same"] = torch.equal(plain["out"], recorded["out"])
    recorded["plain_logged"], recorded["plain_seen"] = plain["logged"], plain["seen"]
    return recorded


def test_barrier_and_a_process_groups_own_call_are_recorded_once_each(ranks) -> None:
    for found in ranks("barrier"):
        assert found["same"] and found["depths"] == (0, 0)
        kinds = [node["collective"] for node in found["nodes"]]
        assert kinds == ["barrier", "all_reduce", "all_reduce"]
        # the independent tracer saw the same c10d ops on an unrecorded run
        assert len(found["plain_seen"]) == len(kinds)
        barrier = found["nodes"][0]
        assert barrier["comm_bytes"] == 0 and barrier["phase"] == "forward"
        assert barrier["group_ranks"] == (0, 1) and barrier["group_name"]
        assert barrier["parent"] == "layer:#0" and barrier["label"] == "barrier"
        assert [node["comm_bytes"] for node in found["nodes"][1:]] == [2 * 4 * 4] * 2
        assert [node["coll_seq"] for node in found["nodes"]] == [0, 1, 2]
        assert all(node["phase"] == "forward" for node in found["nodes"])
        assert found["dot"].count('id="n-op:barrier#forward') == 1


@pytest.mark.needs("flight_recorder")
def test_no_forward_collective_is_recorded_twice_against_the_flight_recorder(ranks) -> None:
    for found in ranks("barrier"):
        assert found["logged"] and found["logged"] == found["plain_logged"]
        assert len(found["nodes"]) == len(found["logged"])


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def _ddp_steps(record: bool, rank: int) -> dict:
    """Three DDP steps (it rebuilds its buckets in the second: C++ broadcasts in the
    forward); per step, the c10d ops an independent tracer saw in the forward."""
    model = nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1e-4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, outs, grads, logged = [], [], [], []
    rec = tgr.Recorder(model, backward=True) if record else None
    if rec is not None:
        rec.__enter__()
    try:
        for step in range(3):
            torch.manual_seed(100 + 10 * step + rank)
            x = torch.randn(4, 8)
            before = len(flight_entries())
            counter = _C10dCounter()
            if record:
                out = model(x)
            else:
                with counter:
                    out = model(x)
            out.pow(2).sum().backward()
            logged.append(len(flight_entries()) - before)
            seen.append(counter.seen)
            outs.append(out.detach())
            grads.append([p.grad.clone() for p in model.parameters()])
            optimizer.step()
            optimizer.zero_grad()
    finally:
        if rec is not None:
            rec.__exit__(None, None, None)
    return {"seen": seen, "outs": outs, "grads": grads, "logged": logged,
            "nodes": _collectives(rec.graph) if rec is not None else [],
            "dot": rec.recording.to_dot() if rec is not None else ""}


@on_ranks
def ddp(ctx: Rank) -> dict:
    plain, recorded = _ddp_steps(False, ctx.rank), _ddp_steps(True, ctx.rank)
    same = all(torch.equal(a, b) for a, b in zip(plain["outs"], recorded["outs"])) and all(
        torch.equal(a, b) for step_a, step_b in zip(plain["grads"], recorded["grads"])
        for a, b in zip(step_a, step_b))
    return {"same": same, "plain_seen": plain["seen"], "nodes": recorded["nodes"],
            "logged": recorded["logged"], "plain_logged": plain["logged"],
            "dot": recorded["dot"]}


def test_ddp_second_step_broadcasts_are_forward_op_nodes_as_a_plain_tracer_counts(
        ranks) -> None:
    for found in ranks("ddp"):
        assert found["same"]
        seen = [name for step in found["plain_seen"] for name in step]
        assert seen and set(seen) == {"broadcast_"}  # DDP's bucket rebuild, from C++
        forward = [node for node in found["nodes"] if node["phase"] == "forward"]
        assert len(forward) == len(seen)
        assert {node["collective"] for node in forward} == {"broadcast"}
        assert {node["parent"] for node in forward} == {"layer:#1"}  # the second step
        assert all(node["group_ranks"] == (0, 1) for node in forward)


@pytest.mark.needs("flight_recorder")
def test_ddp_collectives_forward_and_backward_as_many_as_the_flight_recorder_logs(
        ranks) -> None:
    for found in ranks("ddp"):
        assert found["logged"] == found["plain_logged"]
        assert len(found["nodes"]) == sum(found["logged"])


def test_a_backward_collective_is_drawn_dashed_and_says_backward(ranks) -> None:
    for found in ranks("ddp"):
        backward = [node for node in found["nodes"] if node["phase"] == "backward"]
        lines = [line for line in found["dot"].splitlines() if "op:all_reduce#backward" in line
                 and "class=\"tgr-op\"" in line]
        assert backward and len(lines) == len(backward)
        # its bytes as the label's second line: "64 B", "1.2 kB"
        assert all("all_reduce (backward)" in line and "dashed" in line
                   and re.search(r"\(backward\)\\n[0-9.]+ k?B", line) for line in lines)
        forward = [line for line in found["dot"].splitlines() if "op:broadcast#forward" in line]
        assert forward and not any("dashed" in line or "(backward)" in line for line in forward)


def _tensor_parallel() -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, \
        parallelize_module

    return parallelize_module(_mlp(), init_device_mesh("cpu", (2,)),
                              {"0": ColwiseParallel(), "2": RowwiseParallel()})


@on_ranks
def tensor_parallel(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["dtensor"][0]:
        return {}
    model = _tensor_parallel()
    with tgr.Recorder(model, backward=True) as rec:
        model(torch.ones(4, 8)).sum().backward()
    names = [attrs["name"] for _, attrs in rec.graph.nodes(data=True) if attrs["kind"] == "op"]
    return {"names": names, "dot": rec.recording.to_dot(),
            "all": rec.recording.to_dot(include_ops="all")}


@pytest.mark.needs("dtensor")
def test_identity_wrappers_are_bridged_by_an_edge_at_the_default_options(ranks) -> None:
    for found in ranks("tensor_parallel"):
        wrappers = [name for name in found["names"]
                    if name.partition(".")[0] in ("_wrap_tensor_autograd", "wait_tensor")]
        if not wrappers:
            pytest.skip("this torch's functional collectives record no identity wrapper")
        assert wrappers[0] in found["all"]  # drawn as itself with every op
        assert not any(name in found["dot"] for name in wrappers)
        assert "all_reduce" in found["dot"]
