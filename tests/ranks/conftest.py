"""The ``ranks`` fixture: one two-rank spawn per test module, its results per scenario."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from ranks.harness import FLIGHT_RECORDER, run_ranks


@pytest.fixture(scope="module")
def ranks(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Any]]:
    """``ranks(name)``: what scenario ``name`` returned on each rank (failing the test with
    a rank's traceback where it raised or did not finish). A module that sets
    ``WITH_FLIGHT_RECORDER = True`` has its ranks' process groups log to torch's flight
    recorder (which must be on before ``init_process_group``)."""
    module = request.module
    folder = tmp_path_factory.mktemp(module.__name__.rsplit(".", 1)[-1])
    names = list(module.SCENARIOS)
    with pytest.MonkeyPatch.context() as patch:
        if getattr(module, "WITH_FLIGHT_RECORDER", False):
            patch.setenv(FLIGHT_RECORDER, "4000")
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
