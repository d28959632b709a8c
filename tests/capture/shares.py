"""Module-call shares of a big model, recorded and profiled, measured in a fresh process.

Run as ``python -m tests.capture.shares NAME``: it prints the two sets of shares as JSON.
A full suite's process is no place to take them: twice (torch 2.4, then 2.7) the
profiler there read the last block's MLP of GPT-2 at twice its share in every one of
seven runs, which no run of its own ever did. A fresh process starts every measurement
from the same state, as the benchmarks' harness does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

__all__ = ["fresh_shares", "worst_call"]

_ROUNDS = 3  # of seven runs a side, each adding to the least of every call
TOLERANCE = 0.05


def worst_call(recorded: dict, observed: dict) -> object:
    """The call whose recorded share is furthest from the profiler's."""
    return max(recorded, key=lambda call: abs(recorded[call] - observed[call]))


def _measure(name: str) -> tuple[dict, dict]:
    import torchgraphrec as tgr
    from tests.capture.bigmodels import BIG
    from tests.capture.timing import least_shares, profiler_times, recorded_times

    torch.set_num_threads(1)  # as on a loaded two-core machine it steadies every share
    model, args, kwargs = BIG[name]()
    run = lambda: model(*args, **kwargs)  # noqa: E731
    profiled: list = []
    recorded: list = []
    for _ in range(_ROUNDS):
        # more runs only ever lower each call's least: noise that hit one side's call in
        # every run of a round is left out by the next
        profiled += profiler_times(model, run, 7)
        recorded += [recorded_times(tgr.record(model, args, kwargs).graph) for _ in range(7)]
        shares = least_shares(recorded), least_shares(profiled)
        if shares[0].keys() != shares[1].keys():
            break
        worst = worst_call(*shares)
        if abs(shares[0][worst] - shares[1][worst]) <= TOLERANCE:
            break
    return shares


def fresh_shares(name: str) -> tuple[dict, dict]:
    """``(recorded, observed)`` shares of each ``(qualname, call index)`` of ``BIG[name]``,
    measured in a process of their own."""
    tests = Path(__file__).parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "tests.capture.shares", name], env=env,
                          cwd=tests.parent, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"measuring {name}'s shares failed:\n{done.stderr}")
    return tuple({tuple(call): share for call, share in side}
                 for side in json.loads(done.stdout.splitlines()[-1]))


if __name__ == "__main__":
    measured = _measure(sys.argv[1])
    print(json.dumps([sorted((list(call), share) for call, share in side.items())
                      for side in measured]))
