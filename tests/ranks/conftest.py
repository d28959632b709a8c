"""The ``ranks`` fixture: one two-rank spawn per test module, its results per scenario."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from ranks.harness import run_ranks


@pytest.fixture(scope="module")
def ranks(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Any]]:
    """``ranks(name)``: what scenario ``name`` returned on each rank (failing the test with
    a rank's traceback where it raised or did not finish)."""
    module = request.module
    folder = tmp_path_factory.mktemp(module.__name__.rsplit(".", 1)[-1])
    names = list(module.SCENARIOS)
    results = run_ranks(module.__name__, names, folder)

    def outcome(name: str) -> list[Any]:
        values = []
        for rank, found in enumerate(results):
            status, value = found[name]
            if status != "ok":
                pytest.fail(f"scenario {name} on rank {rank}: {value}", pytrace=False)
            values.append(value)
        return values

    outcome.folder = folder  # type: ignore[attr-defined]
    return outcome
