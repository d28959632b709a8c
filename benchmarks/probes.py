"""Probe overhead on training: ResNet-50-shaped steps with RMS probes on every leaf's output
and output gradient, against plain steps and monitorch's lenses for the same statistics.

    python benchmarks/probes.py [--steps 10]

A step is zero_grad, forward, loss, backward and an SGD update. The recorder is entered once
(``graph="first"``: the graph of the first forward, probes on every forward). Targets: at
most 1.1x the plain step; with ``every=10``, the steps that record nothing at most 1.02x.
``floor: bare hooks`` computes the same statistics from bare module and tensor hooks, and
keeps them in a list: what any probe of every leaf pays before it labels or stores anything.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
# the checkout this file is in, not whichever torchgraphrec is installed
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "tests")]
TARGET = 1.1
EVERY, EVERY_TARGET = 10, 1.02


def _setup() -> tuple[Any, Any, Any]:
    import torch

    import models

    torch.manual_seed(0)
    case = models.resnet50_like(64)
    model = case.model.train()
    batch = torch.randn(2, 3, 64, 64)
    return model, batch, torch.optim.SGD(model.parameters(), lr=1e-3)


#: what a step is timed with: ``time.thread_time`` (the thread's CPU time, steadier on a
#: loaded machine; a CPU backward runs on the calling thread) with ``--clock thread``
_clock: Callable[[], float] = time.perf_counter


def _steps(model: Any, batch: Any, optimizer: Any, count: int,
           after_step: Callable[[], None] = lambda: None) -> list[float]:
    times = []
    for _ in range(count):
        start = _clock()
        optimizer.zero_grad()
        model(batch).logsumexp(dim=1).mean().backward()
        optimizer.step()
        after_step()
        times.append(_clock() - start)
    return times


def _rms_probes() -> list[Any]:
    """The RMS of every leaf's output and output gradient."""
    import torchgraphrec as tgr
    from torchgraphrec import select as S

    return [tgr.probe("output", where=S.leaves(), keep="rms"),
            tgr.probe("grad_output", where=S.leaves(), keep="rms")]


def torchgraphrec_steps(count: int) -> tuple[float, float]:
    import torchgraphrec as tgr

    model, batch, optimizer = _setup()
    _steps(model, batch, optimizer, 2)
    plain = _steps(model, batch, optimizer, count)
    probes = _rms_probes()
    with tgr.Recorder(model, probes=probes, backward=False, graph="first") as rec:
        _steps(model, batch, optimizer, 1, rec.step)
        probed = _steps(model, batch, optimizer, count, rec.step)
    plain += _steps(model, batch, optimizer, count)
    assert len(rec.frame()) > 0
    return statistics.median(plain), statistics.median(probed)


def torchgraphrec_every_steps(count: int) -> tuple[float, float]:
    """The median step that records nothing with ``every=EVERY``, against plain steps."""
    import torchgraphrec as tgr

    model, batch, optimizer = _setup()
    _steps(model, batch, optimizer, 2)
    plain = _steps(model, batch, optimizer, count)
    probes = _rms_probes()
    quiet: list[float] = []
    with tgr.Recorder(model, probes=probes, backward=False, graph="first", every=EVERY) as rec:
        step = 0
        while len(quiet) < count:
            taken = _steps(model, batch, optimizer, 1, rec.step)
            if step % EVERY:
                quiet += taken
            step += 1
    plain += _steps(model, batch, optimizer, count)
    assert len(rec.frame()) > 0
    return statistics.median(plain), statistics.median(quiet)


def floor_steps(count: int) -> tuple[float, float]:
    """The floor: bare hooks on every leaf that compute the same RMS of its output and of
    its output gradient (by a tensor hook) and keep them in a list, nothing else."""
    import math

    import torch

    model, batch, optimizer = _setup()
    kept: list[Any] = []

    def rms(tensor: torch.Tensor) -> None:
        kept.append(torch.linalg.vector_norm(tensor.detach()) / math.sqrt(tensor.numel()))

    def after(module: Any, args: tuple, output: torch.Tensor) -> None:
        rms(output)
        if output.requires_grad:
            output.register_hook(rms)

    _steps(model, batch, optimizer, 2)
    plain = _steps(model, batch, optimizer, count)
    handles = [module.register_forward_hook(after) for module in model.modules()
               if next(module.children(), None) is None]
    try:
        probed = _steps(model, batch, optimizer, count, kept.clear)
    finally:
        for handle in handles:
            handle.remove()
    plain += _steps(model, batch, optimizer, count)
    return statistics.median(plain), statistics.median(probed)


def monitorch_steps(count: int) -> tuple[float, float]:
    from monitorch.inspector import PyTorchInspector
    from monitorch.lens import OutputGradientGeometry, OutputNorm

    model, batch, optimizer = _setup()
    _steps(model, batch, optimizer, 2)
    plain = _steps(model, batch, optimizer, count)
    lenses = [OutputNorm(inplace=True, normalize_by_size=True, activation=True),
              OutputGradientGeometry(inplace=True, normalize_by_size=True,
                                     compute_correlation=False, skip_activation=False)]
    inspector = PyTorchInspector(lenses, visualizer="dummy").attach(model)
    try:
        probed = _steps(model, batch, optimizer, count)
    finally:
        inspector.detach()
    plain += _steps(model, batch, optimizer, count)
    return statistics.median(plain), statistics.median(probed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall")
    options = parser.parse_args()
    global _clock
    _clock = time.thread_time if options.clock == "thread" else time.perf_counter
    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    print(f"{'recorder':18s}{'plain step ms':>15s}{'probed step ms':>16s}{'ratio':>8s}")
    targets = {"torchgraphrec": TARGET, f"every={EVERY} quiet": EVERY_TARGET}
    for name, run in (("torchgraphrec", torchgraphrec_steps),
                      (f"every={EVERY} quiet", torchgraphrec_every_steps),
                      ("floor: bare hooks", floor_steps),
                      ("monitorch", monitorch_steps)):
        try:
            plain, probed = run(options.steps)
        except ModuleNotFoundError:
            print(f"{name:18s}{'-':>15s}  (not installed: pip install -e '.[bench]')")
            continue
        except Exception as exc:  # a peer's failure is a result
            print(f"{name:18s}  FAIL:{type(exc).__name__}: {str(exc)[:90]}")
            continue
        target = targets.get(name)
        verdict = f"  (target <= {target}x: {'met' if probed / plain <= target else 'NOT met'})" \
            if target is not None else ""
        print(f"{name:18s}{plain * 1e3:>15.1f}{probed * 1e3:>16.1f}{probed / plain:>7.2f}x{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
