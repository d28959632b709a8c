"""The two-rank harness itself: results come back per rank, errors and hangs fail clearly."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from ranks.harness import Rank, run_ranks, scenario

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)
#: Kept apart from SCENARIOS, which the module's one spawn runs to the end.
HANGING: dict[str, Any] = {}


@on_ranks
def summed(ctx: Rank) -> float:
    t = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(t)
    return float(t)


@scenario(HANGING)
def hangs(ctx: Rank) -> None:
    time.sleep(3600)


@on_ranks
def raises_on_rank_one(ctx: Rank) -> int:
    if ctx.rank == 1:
        raise KeyError("only here")
    return ctx.rank


def test_every_rank_runs_the_scenario_in_one_process_group(ranks) -> None:
    assert ranks("summed") == [3.0, 3.0]


def test_a_rank_that_raises_reports_its_traceback(ranks) -> None:
    import pytest

    with pytest.raises(pytest.fail.Exception, match="(?s)on rank 1: .*KeyError: 'only here'"):
        ranks("raises_on_rank_one")


def test_a_hang_is_killed_at_the_deadline_and_fails(tmp_path) -> None:
    started = time.monotonic()  # whether the ranks start in time or not, "hangs" never ends
    found = run_ranks(__name__, ["hangs"], tmp_path, deadline_s=2.0, registry_name="HANGING")
    assert time.monotonic() - started < 40
    assert [rank["hangs"][0] for rank in found] == ["error", "error"]
    assert found[0]["hangs"][1].startswith("not finished: timed out after 2 s")
