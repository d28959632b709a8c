"""Two gloo ranks on this machine: one spawn runs every scenario of a test module, with a deadline.

A test module registers its rank-side scenarios with :func:`scenario`; the module's ``ranks``
fixture (``tests/ranks/conftest.py``) spawns the ranks once, each rank runs every scenario in
order and writes what it returned (or the traceback it raised) after each one, and the tests
assert on those values in the parent process. A rank that hangs past the deadline is
killed and its unfinished scenarios fail with ``timed out``; a collective that never
completes raises in its rank after the process group's timeout.
"""

from __future__ import annotations

import datetime
import importlib
import os
import pickle
import socket
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["Rank", "scenario", "run_ranks", "flight_entries", "WORLD", "GROUP_TIMEOUT_S",
           "DEADLINE_S", "FLIGHT_RECORDER"]

WORLD = 2
GROUP_TIMEOUT_S = 45
#: The whole spawn's deadline: starting two ranks takes 13-20 s on two busy cores.
DEADLINE_S = float(os.environ.get("TORCHGRAPHREC_RANKS_DEADLINE", "300"))

#: The variable that turns torch's flight recorder on (read by ``init_process_group``).
FLIGHT_RECORDER = "TORCH_FR_BUFFER_SIZE"

Scenario = Callable[["Rank"], Any]


@dataclass(frozen=True)
class Rank:
    """What a scenario is given: its rank, the world size and a folder of its own."""

    rank: int
    world: int
    folder: Path


def scenario(registry: dict[str, Scenario]) -> Callable[[Scenario], Scenario]:
    """A decorator adding a rank-side function to ``registry`` under its name."""
    def add(function: Scenario) -> Scenario:
        registry[function.__name__] = function
        return function

    return add


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(rank: int, module: str, names: list[str], folder: str, port: int,
               world: int, registry_name: str) -> None:
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
    registry = getattr(importlib.import_module(module), registry_name)
    results: dict[str, tuple[str, Any]] = {}
    out = Path(folder) / f"rank-{rank}.pkl"
    for name in names:
        case_folder = Path(folder) / name / f"rank-{rank}"
        case_folder.mkdir(parents=True, exist_ok=True)
        try:
            results[name] = ("ok", registry[name](Rank(rank, world, Path(folder) / name)))
        except BaseException:  # noqa: B902 - reported to the parent, which fails the test
            results[name] = ("error", traceback.format_exc())
        out.with_suffix(".part").write_bytes(pickle.dumps(results))
        out.with_suffix(".part").replace(out)
    if dist.is_initialized():
        dist.destroy_process_group()


def run_ranks(module: str, names: list[str], folder: Path, world: int = WORLD,
              deadline_s: float = DEADLINE_S,
              registry_name: str = "SCENARIOS") -> list[dict[str, tuple[str, Any]]]:
    """Run the scenarios ``names`` of ``module`` (found in its dict ``registry_name``) in
    ``world`` spawned ranks; per rank, ``{name: ("ok", value) | ("error", traceback) }``
    for each scenario that finished."""
    import torch.multiprocessing as mp

    context = mp.start_processes(_rank_main, args=(module, names, str(folder), _free_port(),
                                                   world, registry_name),
                                 nprocs=world, join=False, start_method="spawn")
    end = time.monotonic() + deadline_s
    failure = ""
    try:
        while not context.join(timeout=max(0.1, min(5.0, end - time.monotonic()))):
            if time.monotonic() > end:
                failure = f"timed out after {deadline_s:.0f} s"
                break
    except Exception as exc:  # a rank died: what it finished is still reported
        failure = f"a rank failed: {exc}"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join(5)
    found = []
    for rank in range(world):
        path = folder / f"rank-{rank}.pkl"
        results = pickle.loads(path.read_bytes()) if path.exists() else {}
        for name in names:
            results.setdefault(name, ("error", f"not finished: {failure or 'no result'}"))
        found.append(results)
    return found


def flight_entries() -> list[dict]:
    """The flight recorder's entries so far on this rank (``[]`` where this torch has none
    for the backend: before 2.5 it dumped NCCL's only)."""
    import torch

    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)
    return pickle.loads(dump()).get("entries", []) if dump is not None else []
