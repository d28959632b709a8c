"""Two gloo ranks: a 2-D mesh (FSDP2 on "dp", tensor parallel on "tp") trained bit-identically
with and without a recorder, and the same step recorded twice giving the same ids and DOT."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from ranks.harness import Rank, scenario
from ranks.test_sharded import _ddp, _fsdp, _mlp, _tensor_parallel, _train

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)


def _two_dims(model: nn.Module) -> nn.Module:
    """Tensor parallel on the mesh's "tp" dimension, FSDP2 on its "dp" one (one rank each
    way would be a 1-D mesh: two ranks allow a (1, 2) mesh)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, \
        parallelize_module

    mesh = init_device_mesh("cpu", (1, dist.get_world_size()), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(),
                                                   "2": RowwiseParallel()})
    return fully_shard(model, mesh=mesh["dp"])


def _needs_two_dims() -> bool:
    from conftest import NEEDS

    return all(NEEDS[name][0] for name in ("fully_shard", "public_dtensor"))


@on_ranks
def two_dims_identical(ctx: Rank) -> dict:
    if not _needs_two_dims():
        return {}
    plain = _train(_two_dims(_mlp()), ctx.rank, None)
    probes = [tgr.probe("output", keep="l2"), tgr.probe("param_grad", keep="l2")]
    recorded = _train(_two_dims(_mlp()), ctx.rank,
                      lambda model: tgr.Recorder(model, backward=True, probes=probes))
    placements = [str(getattr(p, "placements", "")) for p in _two_dims(_mlp()).parameters()]
    return {"outputs": [torch.equal(a, b) for a, b in zip(plain[0], recorded[0])],
            "params": [torch.equal(a, b) for a, b in zip(plain[1], recorded[1])],
            "placements": placements}


@pytest.mark.needs("fully_shard")
@pytest.mark.needs("public_dtensor")
def test_a_2d_mesh_trains_bit_identically_with_and_without_a_recorder(ranks) -> None:
    for found in ranks("two_dims_identical"):
        assert found["outputs"] == [True] * 3 and found["params"] == [True] * 4
        # the parameters are sharded on both dimensions of the mesh
        assert all(text.count("(") >= 2 for text in found["placements"]), found["placements"]


WRAPS: dict[str, tuple[Callable[[nn.Module], nn.Module], tuple[str, ...]]] = {
    "ddp": (_ddp, ()), "fsdp2": (_fsdp, ("fully_shard",)),
    "tensor_parallel": (_tensor_parallel, ("dtensor",)),
    "two_dims": (_two_dims, ("fully_shard", "public_dtensor"))}


def _twice(ctx: Rank, wrap: str) -> dict:
    """One training step's forward and backward recorded twice with the same batch (after
    two steps: DDP and FSDP set up lazily, DDP rebuilds its buckets in its second step)."""
    from conftest import NEEDS

    function, needed = WRAPS[wrap]
    if not all(NEEDS[name][0] for name in needed):
        return {}
    model = function(_mlp())
    torch.manual_seed(ctx.rank)
    x = torch.randn(4, 8)
    for _ in range(2):
        model(x).sum().backward()
    found = []
    for _ in range(2):
        rec = tgr.record(model, x, backward=True)
        graph = rec.graph
        found.append({"ids": sorted(graph.nodes, key=lambda n: graph.nodes[n]["seq"]),
                      "edges": sorted(graph.edges), "dot": rec.to_dot().encode(),
                      "all": rec.to_dot(include_ops="all", expand_leaves=True).encode()})
    return {"first": found[0], "second": found[1], "rank": ctx.rank}


for _wrap in WRAPS:
    SCENARIOS[f"twice_{_wrap}"] = (lambda wrap: lambda ctx: _twice(ctx, wrap))(_wrap)


@pytest.mark.parametrize("wrap", [
    "ddp", pytest.param("fsdp2", marks=pytest.mark.needs("fully_shard")),
    pytest.param("tensor_parallel", marks=pytest.mark.needs("dtensor")),
    pytest.param("two_dims", marks=[pytest.mark.needs("fully_shard"),
                                    pytest.mark.needs("public_dtensor")])])
def test_the_same_step_recorded_twice_gives_the_same_ids_and_dot_bytes(ranks, wrap) -> None:
    for rank, found in enumerate(ranks(f"twice_{wrap}")):
        first, second = found["first"], found["second"]
        assert found["rank"] == rank and len(first["ids"]) > 10
        assert first["ids"] == second["ids"] and first["edges"] == second["edges"]
        assert first["dot"] == second["dot"] and first["all"] == second["all"]
