"""Two gloo ranks: rank stamps, collectives as ops, ranks gathered and compared, no hang."""

from __future__ import annotations

import warnings
from typing import Any

import networkx as nx
import pytest
import torch
import torch.distributed as dist
from torch import nn

import torchgraphrec as tgr
from torchgraphrec import _torch
from ranks.harness import Rank, scenario

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)


def _ops(graph: nx.DiGraph) -> list[tuple[str, dict]]:
    return [(node, attrs) for node, attrs in sorted(graph.nodes(data=True),
                                                    key=lambda item: item[1]["seq"])
            if attrs["kind"] == "op"]


def _collectives(graph: nx.DiGraph) -> list[dict]:
    keys = ("name", "collective", "group_name", "group_ranks", "comm_bytes", "phase", "coll_seq")
    return [{key: attrs.get(key) for key in keys} for _, attrs in _ops(graph)
            if "collective" in attrs]


class AllReduced(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x).clone()
        dist.all_reduce(y)
        return y + 1


# -- 1. rank on the graph ------------------------------------------------------------------


@on_ranks
def stamps(ctx: Rank) -> dict:
    rec = tgr.record(nn.Linear(2, 2), torch.ones(1, 2), backward=True)
    again = tgr.from_json(tgr.to_json(rec.graph))
    with tgr.Recorder(nn.Linear(2, 2), backward=False) as recorder:
        recorder.model(torch.ones(1, 2))
    blind = tgr.record(nn.Linear(2, 2), torch.ones(1, 2), ops=None, backward=True)
    return {"graph": dict(rec.graph.graph), "again": dict(again.graph),
            "recorder": dict(recorder.graph.graph), "blind": dict(blind.graph.graph)}


def test_the_graph_says_its_rank_world_size_and_backend(ranks) -> None:
    for rank, found in enumerate(ranks("stamps")):
        stamped = {key: found["graph"][key] for key in ("rank", "world_size", "dist_backend")}
        assert stamped == {"rank": rank, "world_size": 2, "dist_backend": "gloo"}
        assert found["again"] == found["graph"]  # through JSON
        assert found["recorder"]["rank"] == rank
        # watched where ops are recorded; said not to be where they are not
        assert ("backward_collectives" in found["graph"]) is not \
            _torch.node_scoped_dispatch_modes()
        assert found["blind"]["backward_collectives"].startswith("not seen: ops='none'")
        assert "backward_collectives" not in found["recorder"]  # no backward recorded
        # where torch.distributed's collectives come only through the dispatcher, without
        # their data flow, the graph says so
        assert ("collectives" in found["graph"]) is not _torch.C10D_DISPATCHES_TORCH_FUNCTION
        if not _torch.C10D_DISPATCHES_TORCH_FUNCTION:
            assert found["graph"]["collectives"].startswith("without data flow: ")


def test_no_rank_stamps_without_a_process_group() -> None:
    graph = tgr.record(nn.Linear(2, 2), torch.ones(1, 2), backward=True).graph
    assert not {"rank", "world_size", "dist_backend", "backward_collectives"} & set(graph.graph)


# -- 2. collectives as ops -----------------------------------------------------------------


@on_ranks
def all_reduce_path(ctx: Rank) -> dict:
    torch.manual_seed(0)
    model = AllReduced()
    x = torch.full((2, 4), float(ctx.rank))
    plain = model(x)
    rec = tgr.record(model, x)
    graph = rec.graph
    ops = _ops(graph)
    return {"ops": [attrs["name"] for _, attrs in ops],
            "edges": sorted((a, b) for a, b in graph.edges if a.startswith("op:")
                            or b.startswith("op:")),
            "collectives": _collectives(graph), "same": torch.equal(plain, rec.output),
            "valid": tgr.validate(graph) is None}


@pytest.mark.needs("collectives_dispatched")
def test_an_all_reduce_is_an_op_between_its_producer_and_its_reader(ranks) -> None:
    for found in ranks("all_reduce_path"):
        assert found["ops"] == ["linear", "clone", "all_reduce", "add"]
        assert ("op:clone#1", "op:all_reduce#2") in found["edges"]
        assert ("op:all_reduce#2", "op:add#3") in found["edges"]  # reads the reduced version
        assert ("op:clone#1", "op:add#3") not in found["edges"]
        assert found["collectives"] == [{
            "name": "all_reduce", "collective": "all_reduce", "group_name": "0",
            "group_ranks": (0, 1), "comm_bytes": 2 * 4 * 4, "phase": "forward",
            "coll_seq": 0}]
        assert found["same"] and found["valid"]


class EveryApi(nn.Module):
    """One call of each collective API, the same on both ranks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed._functional_collectives as funcol

        rank = dist.get_rank()
        y = x.clone()
        dist.broadcast(y, src=0)
        parts = [torch.empty_like(y) for _ in range(2)]
        dist.all_gather(parts, y)
        whole = torch.empty(2 * y.shape[0], *y.shape[1:])
        dist.all_gather_into_tensor(whole, y)
        half = torch.empty(y.shape[0] // 2, *y.shape[1:])
        dist.reduce_scatter_tensor(half, y)
        swapped = torch.empty_like(y)
        dist.all_to_all_single(swapped, y)
        work = dist.all_reduce(swapped, async_op=True)
        work.wait()
        if rank == 0:
            dist.send(half, dst=1)
        else:
            dist.recv(half, src=0)
        dist.barrier()
        total = funcol.all_reduce(half, "sum", dist.group.WORLD)
        return swapped.sum() + total.sum() + parts[1].sum() + whole.sum()


@on_ranks
def every_api(ctx: Rank) -> dict:
    x = torch.arange(8.0).reshape(4, 2) + ctx.rank
    plain = EveryApi()(x)
    rec = tgr.record(EveryApi(), x)
    return {"collectives": _collectives(rec.graph), "same": torch.equal(plain, rec.output),
            "valid": tgr.validate(rec.graph) is None,
            "json": [(a.get("collective"), a.get("group_ranks")) for _, a in
                     _ops(tgr.from_json(tgr.to_json(rec.graph)))]}


@pytest.mark.needs("collectives_dispatched")
def test_every_collective_api_is_an_op_with_its_attributes(ranks) -> None:
    found = ranks("every_api")
    kinds = [[c["collective"] for c in rank["collectives"]] for rank in found]
    expected = ["broadcast", "all_gather", "all_gather", "reduce_scatter", "all_to_all",
                "all_reduce"]
    assert kinds[0] == expected + ["send", "barrier", "all_reduce"]
    assert kinds[1] == expected + ["recv", "barrier", "all_reduce"]
    for rank in found:
        collectives = rank["collectives"]
        assert [c["coll_seq"] for c in collectives] == list(range(9))
        assert {c["group_name"] for c in collectives} == {"0"}
        assert all(c["group_ranks"] == (0, 1) and c["phase"] == "forward" for c in collectives)
        by_bytes = [c["comm_bytes"] for c in collectives]
        # 4×2 float32 is 32 B: broadcast, both all-gathers and the reduce-scatter hand over
        # their input; all-to-all and all-reduce 32 B; send/recv the 2×2 half; the
        # barrier none; the functional all-reduce its 2×2 input
        assert by_bytes == [32, 32, 32, 32, 32, 32, 16, 0, 16]
        assert rank["same"] and rank["valid"]
        assert ("all_reduce", (0, 1)) in rank["json"]


class UnevenAndRare(nn.Module):
    """An all-to-all whose ranks hand over different sizes, a coalesced all-gather and a
    monitored barrier: rank 0 hands 4 floats to the all-to-all, rank 1 2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rank = dist.get_rank()
        given, taken = ([1, 3], [1, 1]) if rank == 0 else ([1, 1], [3, 1])
        received = torch.empty(sum(taken))
        dist.all_to_all_single(received, x[:sum(given)].clone(), taken, given)
        gathered = [[torch.empty(2), torch.empty(2)] for _ in range(2)]
        dist.all_gather_coalesced(gathered, [x[:2].clone(), x[2:].clone()])
        dist.monitored_barrier()
        return received.sum() + sum(t.sum() for pair in gathered for t in pair)


@on_ranks
def uneven_and_rare(ctx: Rank) -> dict:
    x = torch.arange(4.0) + ctx.rank
    with warnings.catch_warnings():  # all_gather_coalesced "will be deprecated"
        warnings.simplefilter("ignore")
        plain = UnevenAndRare()(x)
        rec = tgr.record(UnevenAndRare(), x)
    return {"collectives": _collectives(rec.graph), "same": torch.equal(plain, rec.output)}


@pytest.mark.needs("collectives_dispatched")
def test_an_uneven_all_to_all_counts_what_each_rank_hands_over_and_rare_apis_are_ops(
        ranks) -> None:
    # the all-to-all read what each rank received (8 and 16 B, swapped); the coalesced
    # all-gather and the monitored barrier left no op at all
    for rank, found in enumerate(ranks("uneven_and_rare")):
        collectives = found["collectives"]
        assert [c["collective"] for c in collectives] == ["all_to_all", "all_gather", "barrier"]
        assert collectives[0]["comm_bytes"] == (16 if rank == 0 else 8)
        assert found["same"]


# -- 7. no communication added, no hang ----------------------------------------------------


class RaisesOnRankOne(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        dist.all_reduce(y)
        if dist.get_rank() == 1:
            raise ValueError("rank one's own error")
        return y


@on_ranks
def a_raising_rank(ctx: Rank) -> dict:
    from helpers import hook_state
    from torchgraphrec import _torch

    model = RaisesOnRankOne()
    before = hook_state(model)
    modes = (_torch.function_mode_depth(), _torch.dispatch_mode_depth())
    raised = ""
    try:
        tgr.record(model, torch.ones(2))
    except ValueError as exc:
        raised = str(exc)
    after = hook_state(model)
    t = torch.ones(1) * (ctx.rank + 1)
    dist.all_reduce(t)  # the process group still works, and the ranks are in step
    return {"raised": raised, "hooks_same": before == after,
            "modes": modes == (_torch.function_mode_depth(), _torch.dispatch_mode_depth()),
            "sum": float(t)}


def test_a_rank_that_raises_leaves_hooks_modes_and_group_as_they_were(ranks) -> None:
    found = ranks("a_raising_rank")
    assert [f["raised"] for f in found] == ["", "rank one's own error"]
    for rank in found:
        assert rank["hooks_same"] and rank["modes"] and rank["sum"] == 3.0


@on_ranks
def no_collective_added(ctx: Rank) -> dict:
    """The recorder adds no collective: one rank records, the other does not, and the
    ranks stay in step (a recorder's collective would hang or mismatch)."""
    model = AllReduced()
    x = torch.ones(2, 4)
    if ctx.rank == 0:
        with tgr.Recorder(model, backward=True, flops=True) as rec:
            model(x).sum().backward()
            rec.step()
        graph = rec.graph
    else:
        model(x).sum().backward()
        graph = None
    t = torch.tensor([float(ctx.rank)])
    dist.all_reduce(t)
    return {"sum": float(t), "recorded": graph is not None}


def test_the_recorder_adds_no_collective(ranks) -> None:
    found = ranks("no_collective_added")
    assert [f["sum"] for f in found] == [1.0, 1.0]
    assert [f["recorded"] for f in found] == [True, False]


# -- 4. ranks compared ---------------------------------------------------------------------


class Diverges(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        dist.all_reduce(y)
        y = y.relu() if dist.get_rank() == 0 else y.sigmoid()
        return y * 2


@on_ranks
def gathered(ctx: Rank) -> dict:
    same = tgr.record(AllReduced(), torch.ones(2, 4))
    differ = tgr.record(Diverges(), torch.ones(2, 4))
    found: dict[str, Any] = {}
    for name, rec in (("same", same), ("differ", differ)):
        graphs = tgr.gather(rec, dst=0)
        if graphs is None:
            found[name] = None
            continue
        result = tgr.compare_ranks(graphs)
        found[name] = {"ranks": [g.graph["rank"] for g in graphs], "same": result.same,
                       "divergent": result.divergent, "summary": result.summary()}
    return found


@pytest.mark.needs("collectives_dispatched")
def test_gather_brings_every_graph_to_dst_and_compare_ranks_finds_the_divergent(ranks) -> None:
    zero, one = ranks("gathered")
    assert one == {"same": None, "differ": None}
    assert zero["same"]["ranks"] == [0, 1] and zero["same"]["same"] is True
    assert zero["same"]["divergent"] == []
    differ = zero["differ"]
    assert differ["same"] is False and differ["divergent"] == [1]
    assert differ["summary"].splitlines()[1] == (
        "rank 1 parts from rank 0 after collective #0: it ran op sigmoid (2×4, float32) in "
        "layer:#0 where rank 0 ran op relu (2×4, float32) in layer:#0")


@on_ranks
def saved(ctx: Rank) -> dict:
    folder = ctx.folder / "runs"
    model = Diverges()
    with tgr.Recorder(model, save_dir=folder) as rec:
        for _ in range(2):
            model(torch.ones(2, 4)).sum().backward()
            rec.step()
            written = sorted(p.name for p in folder.iterdir() if p.suffix == ".json")
    dist.barrier()
    return {"folder": str(folder), "written": written}


def test_save_dir_writes_one_file_per_rank_and_the_cli_compares_them(ranks, capsys) -> None:
    from torchgraphrec.cli import main

    found = ranks("saved")
    folder = found[0]["folder"]
    assert "rank-0.json" in found[0]["written"] and "rank-1.json" in found[1]["written"]
    graph = tgr.from_json(open(f"{folder}/rank-1.json", encoding="utf-8").read())
    assert graph.graph["rank"] == 1
    assert main(["ranks", folder]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 ranks differ from rank 0: [1]" in out and "sigmoid" in out


def test_the_ranks_command_exits_0_when_the_same_and_2_on_error(tmp_path, capsys) -> None:
    from torchgraphrec.cli import main

    graph = tgr.record(nn.Linear(2, 2), torch.ones(1, 2)).graph
    for rank in (0, 1):
        graph.graph["rank"] = rank
        (tmp_path / f"rank-{rank}.json").write_text(tgr.to_json(graph), encoding="utf-8")
    assert main(["ranks", str(tmp_path)]) == 0
    assert "2 ranks ran the same graph" in capsys.readouterr().out
    assert main(["ranks", str(tmp_path / "missing")]) == 2
    assert "no rank-N.json" in capsys.readouterr().err
    (tmp_path / "rank-1.json").write_text("{", encoding="utf-8")
    assert main(["ranks", str(tmp_path)]) == 2
    assert f"in {tmp_path / 'rank-1.json'}" in capsys.readouterr().err  # which file
    (tmp_path / "rank-1.json").unlink()
    assert main(["ranks", str(tmp_path)]) == 0
    assert "1 rank, rank 0: nothing to compare it with" in capsys.readouterr().out
