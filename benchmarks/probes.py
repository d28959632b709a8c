"""Probe overhead on training: ResNet-50-shaped steps with RMS probes on every leaf's output
and output gradient, against plain steps and monitorch's lenses for the same statistics.

    python benchmarks/probes.py [--steps 20] [--processes 5] [--clock thread]

A step is zero_grad, forward, loss, backward and an SGD update. Strict as the capture
benchmark is: each row runs in fresh interpreters (``--processes``, default 5: the median of
their ratios, shown with the lowest and highest). Each process builds the model twice with
the same weights, one probed and one plain (the copy is the probed one in every other
process), and alternates a plain and a probed step, each after ``gc.collect()``, so that
drift hits both; a ratio is the median probed step over the median plain one. The recorder
is entered once (``graph="first"``: the graph of the first forward, probes on every
forward). Targets: at most 1.1x the plain step; with ``every=10``, the steps that record
nothing at most 1.02x. ``floor: bare hooks`` computes the same statistics from bare module
and tensor hooks and keeps them in a list: what any probe of every leaf pays before it
labels or stores anything. ``plain twin`` probes nothing: what the harness reads where
there is nothing to read (1.00x).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import math
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

HERE = Path(__file__).resolve().parent
# the checkout this file is in, not whichever torchgraphrec is installed
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "tests")]
TARGET = 1.1
EVERY, EVERY_TARGET = 10, 1.02

#: what a step is timed with: ``time.thread_time`` (the thread's CPU time, steadier on a
#: loaded machine; a CPU backward runs on the calling thread) with ``--clock thread``
_clock: Callable[[], float] = time.perf_counter


class Trainer:
    """A ResNet-50-shaped model, its SGD optimizer and one batch: one training step a call."""

    def __init__(self, model: Any, batch: Any) -> None:
        import torch

        self.model, self.batch = model, batch
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(self, after_step: Callable[[], None] = lambda: None) -> float:
        """One timed step, the garbage of earlier ones collected first."""
        gc.collect()
        start = _clock()
        self.optimizer.zero_grad()
        self.model(self.batch).logsumexp(dim=1).mean().backward()
        self.optimizer.step()
        after_step()
        return _clock() - start


def _twins(swap: bool) -> tuple[Trainer, Trainer]:
    """Two trainers of the same model (same weights, same batch): the one to probe and the
    plain one; the probed one is the copy where ``swap`` (half the processes), so that
    whatever tells a copy from its original (where its memory lies) favours neither."""
    import torch

    import models

    torch.manual_seed(0)
    model = models.resnet50_like(64).model.train()
    batch = torch.randn(2, 3, 64, 64)
    first, second = Trainer(model, batch), Trainer(copy.deepcopy(model), batch)
    return (second, first) if swap else (first, second)


def _rms_probes() -> list[Any]:
    """The RMS of every leaf's output and output gradient."""
    import torchgraphrec as tgr
    from torchgraphrec import select as S

    return [tgr.probe("output", where=S.leaves(), keep="rms"),
            tgr.probe("grad_output", where=S.leaves(), keep="rms")]


@contextlib.contextmanager
def _recorder(probed: Trainer, every: int = 1) -> Iterator[Callable[[], None]]:
    import torchgraphrec as tgr

    with tgr.Recorder(probed.model, probes=_rms_probes(), backward=False, graph="first",
                      every=every) as rec:
        yield rec.step
    assert len(rec.frame()) > 0  # the probes recorded


@contextlib.contextmanager
def _every(probed: Trainer) -> Iterator[Callable[[], None]]:
    with _recorder(probed, EVERY) as step:
        yield step


@contextlib.contextmanager
def _bare_hooks(probed: Trainer) -> Iterator[Callable[[], None]]:
    import torch

    kept: list[Any] = []

    def rms(tensor: torch.Tensor) -> None:
        kept.append(torch.linalg.vector_norm(tensor.detach()) / math.sqrt(tensor.numel()))

    def after(module: Any, args: tuple, output: torch.Tensor) -> None:
        rms(output)
        if output.requires_grad:
            output.register_hook(rms)

    handles = [module.register_forward_hook(after) for module in probed.model.modules()
               if next(module.children(), None) is None]
    try:
        yield kept.clear
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _monitorch(probed: Trainer) -> Iterator[Callable[[], None]]:
    from monitorch.inspector import PyTorchInspector
    from monitorch.lens import OutputGradientGeometry, OutputNorm

    lenses = [OutputNorm(inplace=True, normalize_by_size=True, activation=True),
              OutputGradientGeometry(inplace=True, normalize_by_size=True,
                                     compute_correlation=False, skip_activation=False)]
    inspector = PyTorchInspector(lenses, visualizer="dummy").attach(probed.model)
    try:
        yield lambda: None
    finally:
        inspector.detach()


@contextlib.contextmanager
def _nothing(probed: Trainer) -> Iterator[Callable[[], None]]:
    yield lambda: None


WARM_UP = 2  # steps of each trainer before any is timed
#: Each row: how its probed trainer is set up, and which of its steps are timed (by the step's
#: number from 0, warm-up steps included: the recorder's own count of ``step()`` calls).
ROWS: dict[str, tuple[Callable[[Trainer], Any], Callable[[int], bool]]] = {
    "torchgraphrec": (_recorder, lambda number: True),
    f"every={EVERY} quiet": (_every, lambda number: number % EVERY != 0),
    "floor: bare hooks": (_bare_hooks, lambda number: True),
    "monitorch": (_monitorch, lambda number: True),
    "plain twin": (_nothing, lambda number: True),
}
TARGETS = {"torchgraphrec": TARGET, f"every={EVERY} quiet": EVERY_TARGET}


def measure(row: str, steps: int, swap: bool) -> dict:
    """Run in the child process: ``steps`` timed probed steps of ``row`` alternated with
    plain ones."""
    setup, timed = ROWS[row]
    probed, plain = _twins(swap)
    plain_s, probed_s = [], []
    with setup(probed) as after_step:
        for _ in range(WARM_UP):  # lazy imports, allocator, the recorder's first graph
            plain.step()
            probed.step(after_step)
        number = WARM_UP
        while len(probed_s) < steps:
            plain_s.append(plain.step())
            taken = probed.step(after_step)
            if timed(number):
                probed_s.append(taken)
            number += 1
    plain_ms, probed_ms = statistics.median(plain_s) * 1e3, statistics.median(probed_s) * 1e3
    return {"plain_ms": plain_ms, "probed_ms": probed_ms, "ratio": probed_ms / plain_ms}


def run_row(row: str, options: argparse.Namespace) -> list[dict] | str:
    """The row's results in ``options.processes`` fresh interpreters, or why it failed."""
    found = []
    for process in range(options.processes):
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", row,
                               "--steps", str(options.steps), "--clock", options.clock]
                              + ["--swap"] * (process % 2),
                              capture_output=True, text=True, timeout=options.timeout)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["exit " + str(done.returncode)])[-1]
            return "not installed: pip install -e '.[bench]'" \
                if "ModuleNotFoundError" in last else f"FAIL: {last[:100]}"
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed probed steps per process")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    parser.add_argument("--rows", nargs="*", choices=sorted(ROWS), default=list(ROWS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--swap", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    global _clock
    _clock = time.thread_time if options.clock == "thread" else time.perf_counter
    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    if options.child:
        print(json.dumps(measure(options.child, options.steps, options.swap)))
        return 0
    print(f"torch {torch.__version__}, {options.processes} processes per row, "
          f"{options.clock} clock")
    print(f"{'probes':20s}{'plain step ms':>15s}{'probed step ms':>16s}  ratio (lowest-highest)")
    for row in options.rows:
        found = run_row(row, options)
        if isinstance(found, str):
            print(f"{row:20s}  {found}")
            continue
        ratios = sorted(result["ratio"] for result in found)
        plain = statistics.median(result["plain_ms"] for result in found)
        probed = statistics.median(result["probed_ms"] for result in found)
        ratio = statistics.median(ratios)
        target = TARGETS.get(row)
        verdict = f"  (target <= {target}x: {'met' if ratio <= target else 'NOT met'})" \
            if target is not None else ""
        print(f"{row:20s}{plain:>15.1f}{probed:>16.1f}  {ratio:.2f}x "
              f"({ratios[0]:.2f}-{ratios[-1]:.2f}){verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
