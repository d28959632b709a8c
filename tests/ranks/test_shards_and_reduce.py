"""Two gloo ranks: reduce_ranks makes one collective per step(), DTensor's to_local and
from_local are ops joining a DTensor and its local tensor, and the FSDP2 root unit's own
parameters have their shards."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.overrides import TorchFunctionMode

import torchgraphrec as tgr
from torchgraphrec import select
from ranks.harness import Rank, scenario
from ranks.test_sharded import _ddp, _mlp, _tensor_parallel

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)

STATS = ["l2", "rms", "mean", "min", "max"]


class _Counting(TorchFunctionMode):
    """The torch.distributed functions called (the ones a user calls: their inner calls
    run below the mode's own handler)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Any = None) -> Any:
        if getattr(func, "__module__", "") == "torch.distributed.distributed_c10d":
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor``, concatenated in float64 (gathered by the test itself)."""
    found = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(found, tensor.detach().contiguous())
    return torch.cat([part.double().flatten() for part in found])


@on_ranks
def reduce_once(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["collectives_dispatched"][0]:
        return {}
    model = _ddp(_mlp())
    calls, outputs = [], []
    with tgr.Recorder(model, probes=[tgr.probe("output", keep=STATS)],
                      reduce_ranks=True) as rec:
        for step in range(2):
            torch.manual_seed(10 * step + ctx.rank)  # each rank its own batch
            outputs.append(model(torch.randn(4, 8)).detach())
            with _Counting() as counting:
                rec.step()
            calls.append(counting.calls)
    frame = rec.frame()
    rows = frame[(frame["module"] == "module") & frame["stat"].str.endswith("@ranks")]
    reduced = {(int(step), stat): float(value) for step, stat, value in
               zip(rows["step"], rows["stat"], rows["value"])}
    expected = {}
    for step, out in enumerate(outputs):
        whole = _whole(out)
        expected.update({(step, "l2@ranks"): float(whole.norm()),
                         (step, "rms@ranks"): float(whole.pow(2).mean().sqrt()),
                         (step, "mean@ranks"): float(whole.mean()),
                         (step, "min@ranks"): float(whole.min()),
                         (step, "max@ranks"): float(whole.max())})
    return {"calls": calls, "reduced": reduced, "expected": expected,
            "rows": len(frame[frame["stat"].str.endswith("@ranks")]),
            "modules": len(list(model.modules()))}


@pytest.mark.needs("collectives_dispatched")
def test_reduce_ranks_makes_one_collective_per_step_on_every_rank(ranks) -> None:
    for found in ranks("reduce_once"):
        assert found["calls"] == [["all_gather"], ["all_gather"]]
        # every module's output, each statistic, both steps: the whole batch's statistics
        assert found["rows"] == found["modules"] * len(STATS) * 2
        assert found["reduced"].keys() == found["expected"].keys()
        for key, value in found["expected"].items():
            assert found["reduced"][key] == pytest.approx(value, rel=1e-6, abs=1e-7), key


@on_ranks
def reduce_differing_rows(ctx: Rank) -> dict:
    model = _mlp()
    warned = []
    with tgr.Recorder(model, probes=[tgr.probe("output", keep="l2",
                                               where=select.type(nn.Sequential))],
                      reduce_ranks=True) as rec:
        for _ in range(1 + ctx.rank):  # rank 1 calls the model twice in step 0
            model(torch.ones(2, 8))
        with pytest.warns(UserWarning, match="differ") as caught:
            rec.step()
        warned.append(len(caught))
        model(torch.ones(2, 8))
        rec.step()  # the same rows again: reduced
    frame = rec.frame()
    reduced = frame[frame["stat"] == "l2@ranks"]
    return {"warned": warned, "reduced_steps": sorted(set(reduced["step"]))}


def test_reduce_ranks_skips_a_step_whose_rows_differ_between_ranks_and_warns(ranks) -> None:
    for found in ranks("reduce_differing_rows"):
        assert found == {"warned": [1], "reduced_steps": [1]}


def _path(graph: nx.DiGraph, source_layer: str, source: str, target: str) -> bool:
    ops = {attrs.get("name"): node for node, attrs in graph.nodes(data=True)
           if attrs["kind"] == "op" and (attrs["parent"] == source_layer
                                         or attrs.get("name") == target)}
    return nx.has_path(graph, ops[source], ops[target])


@on_ranks
def to_local_linked(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["dtensor"][0]:
        return {}
    found: dict[str, Any] = {}
    for how, grad in (("grad", True), ("no_grad", False)):
        model = _tensor_parallel(_mlp())
        seen: dict[str, torch.Tensor] = {}
        # before tensor parallel's own hook turns the output into its local tensor
        model[0].register_forward_hook(lambda m, a, out: seen.update(linear=out), prepend=True)
        model[1].register_forward_hook(lambda m, args, out: seen.update(relu_in=args[0]))
        with torch.set_grad_enabled(grad), tgr.Recorder(model) as rec:
            model(torch.ones(4, 8))
        graph = rec.graph
        links = {}
        for node, attrs in graph.nodes(data=True):
            if attrs.get("name") in ("to_local", "from_local"):
                source = next(iter(graph.predecessors(node)))
                links.setdefault(attrs["name"], []).append(
                    (graph.nodes[source].get("local_shape"), attrs["shape"]))
        found[how] = {
            "relu": _path(graph, "layer:0#0", "linear", "relu"),
            "all_reduce": _path(graph, "layer:2#0", "linear", "all_reduce"),
            "links": links, "valid": tgr.validate(graph) is None,
            # independently: ReLU read the memory of Linear 0's local shard
            "same_memory": seen["relu_in"].data_ptr() == seen["linear"].to_local().data_ptr()}
    return found


@pytest.mark.needs("dtensor")
def test_to_local_and_from_local_are_ops_joining_a_dtensor_and_its_local_tensor(ranks) -> None:
    for found in ranks("to_local_linked"):
        for how in ("grad", "no_grad"):
            case = found[how]
            assert case["same_memory"] and case["valid"], how
            assert case["relu"] and case["all_reduce"], how  # Linear 0 → ReLU, Linear 2 → all_reduce
            # to_local's output has its source DTensor's local shape (where the source is a
            # tensor node that shows it)
            to_local = case["links"]["to_local"]
            assert len(to_local) == 2 and (4, 8) in [shape for _, shape in to_local], how
            assert all(local in (None, shape) for local, shape in to_local), how
            assert len(case["links"]["from_local"]) == 2, how


class _RootOwns(nn.Module):
    """A block that is its own FSDP unit, and a Linear directly on the root."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


@on_ranks
def fsdp2_root_params(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["fully_shard"][0]:
        return {}
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    model = _RootOwns()
    fully_shard(model.block)
    fully_shard(model)
    with tgr.Recorder(model) as rec:
        out = model(torch.ones(2, 8))
    graph = rec.graph  # built while the root keeps its parameters gathered
    gathered = [name for name, p in model.named_parameters() if not isinstance(p, DTensor)]
    out.sum().backward()  # the root reshards: each parameter is its shard again
    shards = {f"param:{name}": ((tuple(p.to_local().shape), (repr(p.placements[0]),))
                                if isinstance(p, DTensor) else None)
              for name, p in model.named_parameters()}
    params = {node: (attrs.get("local_shape"), attrs.get("placements"))
              for node, attrs in graph.nodes(data=True) if attrs["kind"] == "param"}
    return {"gathered": gathered, "params": params, "shards": shards,
            "summary": rec.summary()}


@pytest.mark.needs("fully_shard")
def test_fsdp2_root_units_own_parameters_have_their_shards(ranks) -> None:
    for found in ranks("fsdp2_root_params"):
        assert found["gathered"] == ["head.weight", "head.bias"]  # what made it hard
        assert len(found["params"]) == 4 and found["params"] == found["shards"]
        assert found["params"]["param:head.weight"] == ((2, 16), ("Shard(dim=0)",))
        assert "Sharded params: 4" in found["summary"]
