"""Two gloo ranks with torch's flight recorder on: the backward's collectives (DDP's bucket
all-reduce, FSDP2's re-gathers and reduce-scatters) as op nodes, as many as it logs."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from torchgraphrec import _torch
from ranks.harness import Rank, flight_entries, scenario

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)
WITH_FLIGHT_RECORDER = True


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def _fsdp(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    fully_shard(model[0])
    fully_shard(model[2])
    return fully_shard(model)


def _ddp(model: nn.Module) -> nn.Module:
    # small buckets: the second step all-reduces more than one
    return nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1e-4)


def _steps(wrap: Callable[[nn.Module], nn.Module], ctx: Rank, record: bool,
           input_grad: bool) -> dict:
    """Two SGD steps; per step, the flight recorder's entries logged during the backward;
    the backward collectives' op nodes, the gradients and the dispatch stack's depth."""
    model = wrap(_mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logged, grads, depths = [], [], []
    rec = tgr.Recorder(model, backward=True) if record else None
    if rec is not None:
        rec.__enter__()
    try:
        for step in range(2):
            torch.manual_seed(100 + 10 * step + ctx.rank)
            loss = model(torch.randn(4, 8, requires_grad=input_grad)).pow(2).sum()
            before = len(flight_entries())
            loss.backward()
            depths.append(_torch.dispatch_mode_depth())
            logged.append([entry["profiling_name"] for entry in flight_entries()[before:]])
            grads.append([p.grad.detach().clone() for p in model.parameters()])
            optimizer.step()
            optimizer.zero_grad()
    finally:
        if rec is not None:
            rec.__exit__(None, None, None)
    nodes = [] if rec is None else [
        {key: attrs.get(key) for key in ("collective", "phase", "coll_seq", "comm_bytes",
                                         "group_name", "group_ranks", "parent", "label")}
        for _, attrs in sorted(rec.graph.nodes(data=True), key=lambda item: item[1]["seq"])
        if attrs.get("phase") == "backward"]
    drawn = {} if rec is None else {
        "valid": tgr.validate(rec.graph) is None,
        "json": tgr.to_json(tgr.from_json(tgr.to_json(rec.graph))) == tgr.to_json(rec.graph),
        "dot": rec.recording.to_dot()}
    return {"logged": logged, "grads": grads, "nodes": nodes, "depths": depths,
            "graph": None if rec is None else dict(rec.graph.graph), "drawn": drawn}


def _compare(wrap: Callable[[nn.Module], nn.Module], ctx: Rank, input_grad: bool = False
             ) -> dict:
    plain = _steps(wrap, ctx, False, input_grad)
    recorded = _steps(wrap, ctx, True, input_grad)
    recorded["same_grads"] = all(
        torch.equal(_local(a), _local(b)) for step_a, step_b in
        zip(plain["grads"], recorded["grads"]) for a, b in zip(step_a, step_b))
    recorded["plain_logged"] = plain["logged"]
    del recorded["grads"]
    return recorded


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


@on_ranks
def ddp(ctx: Rank) -> dict:
    return _compare(_ddp, ctx)


@on_ranks
def fsdp2(ctx: Rank) -> dict:
    from conftest import NEEDS

    return _compare(_fsdp, ctx) if NEEDS["fully_shard"][0] else {}


def _check(found: dict) -> list[dict]:
    logged = [name for step in found["logged"] for name in step]
    assert logged, "the flight recorder logged nothing: the comparison would prove nothing"
    assert found["logged"] == found["plain_logged"]  # the recorder added no collective
    assert len(found["nodes"]) == len(logged)
    assert found["same_grads"] and found["depths"] == [0, 0]
    assert "backward_collectives" not in found["graph"]
    assert found["drawn"]["valid"] and found["drawn"]["json"]
    for node in found["nodes"]:
        assert node["group_ranks"] == (0, 1) and node["group_name"]
        assert node["comm_bytes"] > 0 and node["parent"] is not None
    numbers = [node["coll_seq"] for node in found["nodes"]]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    return found["nodes"]


@pytest.mark.needs("flight_recorder")
def test_ddp_bucket_all_reduces_are_backward_op_nodes_as_many_as_the_flight_recorder_logs(
        ranks) -> None:
    for found in ranks("ddp"):
        nodes = _check(found)
        assert {node["collective"] for node in nodes} == {"all_reduce"}
        # DDP's reducer runs them: drawn in the DDP call whose backward it was
        assert {node["parent"] for node in nodes} == {"layer:#0", "layer:#1"}
        assert found["drawn"]["dot"].count('id="n-op:all_reduce#backward') == len(nodes)


def test_ddp_all_reduces_every_gradient_once_a_step_in_the_backward(ranks) -> None:
    size = sum(p.numel() * p.element_size() for p in _mlp().parameters())
    for found in ranks("ddp"):
        assert found["same_grads"] and found["depths"] == [0, 0]
        assert {(node["phase"], node["collective"]) for node in found["nodes"]} == {
            ("backward", "all_reduce")}
        # whatever the buckets: two steps, each gradient once
        assert sum(node["comm_bytes"] for node in found["nodes"]) == 2 * size


@pytest.mark.needs("flight_recorder")
@pytest.mark.needs("fully_shard")
def test_fsdp2_regathers_and_reduce_scatters_are_backward_op_nodes(ranks) -> None:
    for found in ranks("fsdp2"):
        nodes = _check(found)
        kinds = [node["collective"] for node in nodes]
        assert kinds.count("all_gather") == kinds.count("reduce_scatter") == 4  # 2 units x 2
        # a gather is drawn in the unit whose backward issued it (FSDP prefetches the next
        # unit's from the one before); a reduce-scatter FSDP's root callback issued, at the root
        units = {"layer:0#0", "layer:2#0", "layer:0#1", "layer:2#1"}
        gathers = {node["parent"] for node in nodes if node["collective"] == "all_gather"}
        assert gathers and gathers <= units
        assert {node["parent"] for node in nodes} <= units | {"layer:#0", "layer:#1"}


def _tensor_parallel(model: nn.Module) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, \
        parallelize_module

    mesh = init_device_mesh("cpu", (2,))
    return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


@on_ranks
def tensor_parallel(ctx: Rank) -> dict:
    from conftest import NEEDS

    # the input's gradient is what tensor parallel all-reduces in the backward
    return _compare(_tensor_parallel, ctx, input_grad=True) if NEEDS["dtensor"][0] else {}


@pytest.mark.needs("flight_recorder")
@pytest.mark.needs("dtensor")
def test_tensor_parallel_backward_all_reduce_of_the_replicated_input_grad(ranks) -> None:
    for found in ranks("tensor_parallel"):
        nodes = _check(found)
        assert {node["collective"] for node in nodes} == {"all_reduce"}


@on_ranks
def comm_debug_mode(ctx: Rank) -> dict:
    from contextlib import nullcontext

    from conftest import NEEDS

    if not (NEEDS["dtensor"][0] and NEEDS["comm_debug_mode"][0]):
        return {}
    from torch.distributed.tensor.debug import CommDebugMode

    counts, backward = [], []
    for record in (False, True):
        model = _tensor_parallel(_mlp())
        x = torch.ones(4, 8, requires_grad=True)
        with CommDebugMode() as comm:
            with tgr.Recorder(model) if record else nullcontext() as rec:
                model(x).sum().backward()
        counts.append(comm.get_total_counts())
        if rec is not None:
            backward = [attrs["collective"] for _, attrs in rec.graph.nodes(data=True)
                        if attrs.get("phase") == "backward"]
    return {"counts": counts, "backward": backward}


@pytest.mark.needs("dtensor")
@pytest.mark.needs("comm_debug_mode")
def test_a_users_comm_debug_mode_counts_what_it_counts_without_the_recorder(ranks) -> None:
    for found in ranks("comm_debug_mode"):
        plain, recorded = found["counts"]
        assert plain > 0 and recorded == plain
        assert found["backward"] == ["all_reduce"]
