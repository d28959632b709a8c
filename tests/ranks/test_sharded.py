"""Two gloo ranks: DTensor parameters and probes, statistics reduced over ranks, and
DDP, FSDP2 and tensor parallel trained bit-identically with and without a recorder."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
from torch import nn

import torchgraphrec as tgr
from ranks.harness import Rank, scenario
from torchgraphrec._torch import SAVED_TENSOR_HOOKS_READABLE as COUNTS_SAVED

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def _tensor_parallel(model: nn.Module) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, \
        parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


def _fsdp(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    fully_shard(model[0])
    fully_shard(model[2])
    return fully_shard(model)


def _ddp(model: nn.Module) -> nn.Module:
    return nn.parallel.DistributedDataParallel(model)


def _train(model: nn.Module, rank: int, recorder: Callable[[nn.Module], Any] | None
           ) -> tuple[list[torch.Tensor], list[torch.Tensor], Any]:
    """Three SGD steps (recorded with ``recorder`` where given): each output, the
    parameters (this rank's shards) and the recorder's frame()."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs = []
    rec = recorder(model) if recorder else None
    if rec is not None:
        rec.__enter__()
    try:
        for step in range(3):
            torch.manual_seed(100 + 10 * step + rank)
            out = model(torch.randn(4, 8))
            out.pow(2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            if rec is not None:
                rec.step()
            outputs.append(_local(out).clone())
    finally:
        if rec is not None:
            rec.__exit__(None, None, None)
    frame = rec.frame() if rec is not None else None  # never raises on DTensors
    return outputs, [_local(p).clone() for p in model.parameters()], frame


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to_local() if hasattr(tensor, "to_local") else tensor.detach()


WRAPS = {"ddp": _ddp, "fsdp2": _fsdp, "tensor_parallel": _tensor_parallel}
NEEDED = {"ddp": None, "fsdp2": "fully_shard", "tensor_parallel": "dtensor"}


def _identical(ctx: Rank, wrap: str) -> dict:
    from conftest import NEEDS

    if NEEDED[wrap] and not NEEDS[NEEDED[wrap]][0]:
        return {}
    plain = _train(WRAPS[wrap](_mlp()), ctx.rank, None)
    probes = [tgr.probe("output", keep=["l2", "mean"]), tgr.probe("param_grad", keep="l2")]
    recorded = _train(WRAPS[wrap](_mlp()), ctx.rank,
                      lambda model: tgr.Recorder(model, backward=True, probes=probes))
    frame = recorded[2]
    return {"outputs": all(torch.equal(a, b) for a, b in zip(plain[0], recorded[0])),
            "params": all(torch.equal(a, b) for a, b in zip(plain[1], recorded[1])),
            "count": len(plain[1]),
            "frame": (sorted(set(frame["site"])), sorted(set(frame["rank"])))}


for _wrap in WRAPS:
    SCENARIOS[f"identical_{_wrap}"] = (lambda wrap: lambda ctx: _identical(ctx, wrap))(_wrap)


@pytest.mark.parametrize("wrap", [
    "ddp", pytest.param("fsdp2", marks=pytest.mark.needs("fully_shard")),
    pytest.param("tensor_parallel", marks=pytest.mark.needs("dtensor"))])
def test_three_steps_are_bit_identical_with_and_without_a_recorder(ranks, wrap: str) -> None:
    for rank, found in enumerate(ranks(f"identical_{wrap}")):
        assert found == {"outputs": True, "params": True, "count": 4,
                         "frame": (["output", "param_grad"], [rank])}


@on_ranks
def tensor_parallel(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["dtensor"][0]:
        return {}
    model = _tensor_parallel(_mlp())
    probes = [tgr.probe("param", keep=["l2", "mean", "max"]),
              tgr.probe("output", keep="l2")]
    with tgr.Recorder(model, probes=probes, reduce_ranks=True) as rec:
        model(torch.ones(4, 8)).sum().backward()
        rec.step()
    graph = rec.graph
    frame = rec.frame()
    weight = model[0].weight
    params = {node: {key: attrs.get(key) for key in ("shape", "local_shape", "placements",
                                                      "bytes")}
              for node, attrs in graph.nodes(data=True) if attrs["kind"] == "param"}

    def value(stat: str) -> float:
        rows = frame[(frame["module"] == "0") & (frame["site"] == "param")
                     & (frame["path"].str.contains("weight")) & (frame["stat"] == stat)]
        return float(rows["value"].iloc[0])

    return {"params": params, "summary": rec.summary(),
            "columns": list(frame.columns), "ranks": sorted(set(frame["rank"])),
            "local_l2": value("l2"), "expected_local": float(weight.to_local().norm()),
            "reduced_l2": value("l2@ranks"), "global_l2": float(weight.full_tensor().norm()),
            "reduced_max": value("max@ranks"), "global_max": float(weight.full_tensor().max()),
            "reduced_mean": value("mean@ranks"),
            "global_mean": float(weight.full_tensor().mean()),
            "valid": tgr.validate(graph) is None}


@pytest.mark.needs("dtensor")
def test_tensor_parallel_params_have_global_and_local_shapes_and_placements(ranks) -> None:
    for rank, found in enumerate(ranks("tensor_parallel")):
        weight = found["params"]["param:0.weight"]
        assert weight == {"shape": (16, 8), "local_shape": (8, 8),
                          "placements": ("Shard(dim=0)",), "bytes": 8 * 8 * 4}
        assert found["params"]["param:2.weight"]["placements"] == ("Shard(dim=1)",)
        assert "Sharded params: 3" in found["summary"] and "0.weight" in found["summary"]
        assert found["valid"]


@pytest.mark.needs("dtensor")
def test_probes_on_dtensors_keep_the_local_shard_and_a_rank_column(ranks) -> None:
    for rank, found in enumerate(ranks("tensor_parallel")):
        assert found["columns"][0] == "rank" and found["ranks"] == [rank]
        assert found["local_l2"] == pytest.approx(found["expected_local"], rel=1e-6)
        assert found["local_l2"] < found["global_l2"]


@pytest.mark.needs("dtensor")
def test_reduce_ranks_gives_the_statistics_of_the_whole_tensor(ranks) -> None:
    for found in ranks("tensor_parallel"):
        assert found["reduced_l2"] == pytest.approx(found["global_l2"], rel=1e-6)
        assert found["reduced_max"] == pytest.approx(found["global_max"], rel=1e-6)
        assert found["reduced_mean"] == pytest.approx(found["global_mean"], rel=1e-5, abs=1e-7)


@on_ranks
def comm_debug_mode(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not (NEEDS["dtensor"][0] and NEEDS["comm_debug_mode"][0]):
        return {}
    from torch.distributed.tensor.debug import CommDebugMode

    plain = _tensor_parallel(_mlp())
    recorded = _tensor_parallel(_mlp())
    x = torch.ones(4, 8)
    plain(x).sum().backward()
    with CommDebugMode() as comm:
        with tgr.Recorder(recorded, ops="torch", flops=True, memory=True) as rec:
            recorded(x).sum().backward()
    grads = [torch.equal(_local(a.grad), _local(b.grad)) for a, b in
             zip(plain.parameters(), recorded.parameters())]
    return {"grads": grads, "counted": comm.get_total_counts() > 0,
            "ops": sum(1 for _, kind in rec.graph.nodes(data="kind") if kind == "op"),
            "saved_bytes": rec.graph.graph.get("saved_bytes")}


@pytest.mark.needs("dtensor")
@pytest.mark.needs("comm_debug_mode")
def test_comm_debug_mode_around_a_recorder_on_tensor_parallel(ranks) -> None:
    for found in ranks("comm_debug_mode"):
        assert found["grads"] == [True] * 4 and found["counted"] and found["ops"] > 0
        # only ReLU's output is saved that is neither a parameter nor the input: this
        # rank's 8 of its 16 columns, 4 rows of float32 (None where torch cannot count)
        assert found["saved_bytes"] == (4 * 8 * 4 if COUNTS_SAVED else None)


def _params(graph: Any) -> dict[str, dict]:
    keys = ("shape", "local_shape", "placements", "bytes")
    return {node: {key: attrs.get(key) for key in keys}
            for node, attrs in graph.nodes(data=True) if attrs["kind"] == "param"}


@on_ranks
def fsdp2(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["fully_shard"][0]:
        return {}
    model = _fsdp(_mlp())
    found = {}
    for attempt in ("fresh", "again"):  # before and after FSDP made its unsharded params
        with tgr.Recorder(model, backward=True, flops=True, memory=True) as rec:
            model(torch.ones(4, 8)).sum().backward()
        graph = rec.graph
        found[attempt] = {
            "params": _params(graph),
            "feeds": sorted(target for node, target, kind in graph.edges(data="kind")
                            if kind == "param"),
            "collectives": [(attrs["phase"], attrs["collective"])
                            for _, attrs in graph.nodes(data=True) if attrs.get("collective")],
            "valid": tgr.validate(graph) is None,
            "flops": (graph.graph["flops"], graph.graph["backward_flops"]),
            "saved_bytes": graph.graph.get("saved_bytes")}
    found["expected_flops"] = _counted(_mlp(), torch.ones(4, 8))
    return found


def _counted(forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
             ) -> tuple[int, int]:
    """What FlopCounterMode counts for ``forward(x)`` and for its ``.sum().backward()``."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        out = forward(x)
    with FlopCounterMode(display=False) as backward:
        out.sum().backward()
    return counter.get_total_flops(), backward.get_total_flops()


@on_ranks
def tensor_parallel_flops(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["dtensor"][0]:
        return {}
    model = _tensor_parallel(_mlp())
    x = torch.ones(4, 8)
    with tgr.Recorder(model, flops=True, memory=True, backward=True) as rec:
        model(x).sum().backward()
    linears = {attrs["parent"]: attrs["flops"] for _, attrs in rec.graph.nodes(data=True)
               if attrs.get("name") == "linear"}
    # this rank's computation on plain tensors: its shards of each Linear
    w0, b0, w2 = (_local(p).clone().requires_grad_() for p in
                  (model[0].weight, model[0].bias, model[2].weight))
    local = _counted(lambda x: nn.functional.linear(
        nn.functional.linear(x, w0, b0).relu(), w2), x)
    tensors = {attrs["parent"]: {key: attrs.get(key) for key in
                                 ("shape", "local_shape", "placements")}
               for _, attrs in rec.graph.nodes(data=True)
               if attrs["kind"] == "tensor" and "placements" in attrs}
    again = tgr.from_json(tgr.to_json(rec.graph))
    return {"recorded": (rec.graph.graph["flops"], rec.graph.graph["backward_flops"]),
            "saved_bytes": rec.graph.graph.get("saved_bytes"),
            "local": local, "global": _counted(_mlp(), x), "linears": linears,
            "tensors": tensors, "valid": tgr.validate(rec.graph) is None,
            "json": [attrs.get("placements") for _, attrs in sorted(again.nodes(data=True))],
            "placements": [attrs.get("placements")
                           for _, attrs in sorted(rec.graph.nodes(data=True))]}


@pytest.mark.needs("dtensor")
def test_flops_under_tensor_parallel_count_this_ranks_shard(ranks) -> None:
    for found in ranks("tensor_parallel_flops"):
        assert found["recorded"] == found["local"]
        # ReLU's local output (see above)
        assert found["saved_bytes"] == (4 * 8 * 4 if COUNTS_SAVED else None)
        assert found["linears"] == {"layer:0#0": 4 * 8 * 8 * 2, "layer:2#0": 4 * 8 * 8 * 2}
        assert 2 * found["recorded"][0] == found["global"][0]  # each Linear sharded in two


@pytest.mark.needs("fully_shard")
def test_flops_under_fsdp2_count_the_gathered_weights(ranks) -> None:
    for found in ranks("fsdp2"):
        assert found["fresh"]["flops"] == found["again"]["flops"] == found["expected_flops"]
        # ReLU's output, whole (FSDP2 computes on gathered weights); the gathered weights
        # are parameters, which are not counted
        assert found["fresh"]["saved_bytes"] == found["again"]["saved_bytes"] == (
            4 * 16 * 4 if COUNTS_SAVED else None)


@pytest.mark.needs("fully_shard")
def test_fsdp2_gives_one_param_node_per_parameter_with_its_shard(ranks) -> None:
    for found in ranks("fsdp2"):
        for attempt in ("fresh", "again"):
            params = found[attempt]["params"]
            assert params == {
                "param:0.weight": {"shape": (16, 8), "local_shape": (8, 8),
                                   "placements": ("Shard(dim=0)",), "bytes": 8 * 8 * 4},
                "param:0.bias": {"shape": (16,), "local_shape": (8,),
                                 "placements": ("Shard(dim=0)",), "bytes": 8 * 4},
                "param:2.weight": {"shape": (8, 16), "local_shape": (4, 16),
                                   "placements": ("Shard(dim=0)",), "bytes": 4 * 16 * 4},
                "param:2.bias": {"shape": (8,), "local_shape": (4,),
                                 "placements": ("Shard(dim=0)",), "bytes": 4 * 4}}, attempt
            # each feeds its Linear; FSDP's all-gathers stay in the graph
            assert len(found[attempt]["feeds"]) == 4
            # the backward re-gathers both units and reduce-scatters their gradients
            assert sorted(found[attempt]["collectives"]) == [
                ("backward", "all_gather")] * 2 + [("backward", "reduce_scatter")] * 2 + [
                ("forward", "all_gather")] * 2
            assert found[attempt]["valid"]


@on_ranks
def ddp_param_grad(ctx: Rank) -> dict:
    model = _ddp(_mlp())
    torch.manual_seed(ctx.rank)  # each rank its own batch: its own gradient before averaging
    x = torch.randn(4, 8)
    local = _mlp()
    local(x).pow(2).sum().backward()
    with tgr.Recorder(model, probes=[tgr.probe("param_grad", keep="l2")]) as rec:
        model(x).pow(2).sum().backward()
        averaged = {name.removeprefix("module."): float(p.grad.norm())
                    for name, p in model.named_parameters()}
        rec.step()
    frame = rec.frame()
    rows = frame[(frame["site"] == "param_grad") & (frame["stat"] == "l2")]
    recorded = {f"{module}.{path}": float(value) for module, path, value in
                zip(rows["module"], rows["path"], rows["value"])}
    return {"recorded": recorded, "averaged": averaged,
            "local": {name: float(p.grad.norm()) for name, p in local.named_parameters()}}


def test_ddp_param_grad_is_the_averaged_gradient_p_grad_holds_after_backward(ranks) -> None:
    found = ranks("ddp_param_grad")
    for rank in found:
        recorded = {key.removeprefix("module."): value
                    for key, value in rank["recorded"].items()}
        assert recorded == rank["averaged"], rank
        assert recorded != rank["local"]
    assert found[0]["averaged"] == found[1]["averaged"]  # the same on every rank


@pytest.mark.needs("public_dtensor")
def test_tensor_nodes_of_dtensors_have_global_and_local_shapes_and_placements(ranks) -> None:
    for found in ranks("tensor_parallel_flops"):
        tensors = found["tensors"]
        # ColwiseParallel's Linear returns a DTensor sharded on its last dimension, and
        # RowwiseParallel's a partial sum, before they are made plain tensors again
        assert tensors["layer:0#0"] == {"shape": (4, 16), "local_shape": (4, 8),
                                        "placements": ("Shard(dim=1)",)}
        assert tensors["layer:2#0"]["placements"] == ("Partial(sum)",)
        assert tensors["layer:2#0"]["shape"] == tensors["layer:2#0"]["local_shape"] == (4, 8)
        assert found["valid"] and found["json"] == found["placements"]  # through JSON
