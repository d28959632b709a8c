"""Where a recording's work goes, counted in interpreter steps (bytecodes) per event.

Times move with the machine, its caches and its load; the number of bytecodes the
recorder's own Python runs does not. This counts them, with ``sys.settrace`` opcode
events, on a chain of ``--blocks`` blocks (``Linear`` then ``ReLU`` in a module of their
own: three module calls and two ops per block), phase by phase: setting up (``Recorder``
and entering it), the hot path (the hooks and the op handler, run during the forward),
naming (turning the forward's records into node attributes, when the forward ends) and
building the graph with its costs. Each figure is per event (module calls plus ops), beside
``floor:noting`` (``capture.py``'s hooks and mode that only note what each call and op
took and made) and what PyTorch's own Python runs per event with the recorder's hooks and
mode in place. One recording is counted after two warm-up recordings; the count is exact
and the same on every run with the same torch and Python.

    python benchmarks/steps.py
    python benchmarks/steps.py --blocks 50 --modes no_grad
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
PHASES = ("setup", "hot path", "naming", "build")
#: Files whose functions run when a forward ends, turning records into node attributes.
NAMING_FILES = ("capture/naming.py", "capture/opnames.py", "capture/session.py",
                "capture/autograd.py")


def _chain(blocks: int) -> tuple[Any, Any]:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear, self.act = nn.Linear(8, 8), nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.linear(x))

    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(blocks)]), torch.randn(4, 8)


class StepCounter:
    """Counts the opcodes run in frames of files under ``roots`` by a label: ``label(path)``
    when the frame starts, or ``inner`` for every frame run inside one whose file is one of
    ``inner_files`` while ``label`` gives ``outer`` (naming, called from a hook)."""

    def __init__(self, roots: tuple[str, ...], label: Callable[[str], str],
                 outer: str = "", inner: str = "", inner_files: tuple[str, ...] = ()) -> None:
        self.roots, self.label = roots, label
        self.outer, self.inner, self.inner_files = outer, inner, inner_files
        self.counts: Counter = Counter()
        self._inside = 0  # frames of inner_files open

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        path = frame.f_code.co_filename
        if not any(root in path for root in self.roots):
            return None
        label = self.label(path)
        opens = label == self.outer and any(name in path for name in self.inner_files)
        if opens:
            self._inside += 1
        if self._inside and label != "torch":
            label = self.inner
        frame.f_trace_opcodes = True
        counts = self.counts

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[label] += 1
            elif event == "return" and opens:
                self._inside -= 1
            return local
        return local

    def __enter__(self) -> "StepCounter":
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def count_recording(blocks: int, mode: str, ops: str) -> Counter:
    """Steps of one recording by phase, and PyTorch's own steps meanwhile (``torch``)."""
    import torch

    from torchgraphrec.recorder import Recorder

    model, x = _chain(blocks)
    phase = ["setup"]

    def label(path: str) -> str:
        return "torch" if "/torch/" in path and "torchgraphrec" not in path else phase[0]

    grad = torch.no_grad() if mode == "no_grad" else torch.enable_grad()
    with grad:
        for _ in range(2):  # warm-up: caches of signatures, argument texts, calibration
            with Recorder(model, ops=ops, backward=False) as recorder:
                model(x)
            recorder._build(share=True)
        counter = StepCounter(("torchgraphrec", "/torch/"), label, "hot path", "naming",
                              NAMING_FILES)
        with counter:
            recorder = Recorder(model, ops=ops, backward=False)
            recorder.__enter__()
            phase[0] = "hot path"
            model(x)
            phase[0] = "build"
            recorder.__exit__(None, None, None)
            recorder._build(share=True)
    return counter.counts


def count_noting(blocks: int, mode: str) -> Counter:
    """Steps of ``floor:noting`` recording the same chain (its own and PyTorch's)."""
    import torch
    from tools import TOOLS

    model, x = _chain(blocks)
    thunk = TOOLS["floor:noting"](model, (x,), {})
    grad = torch.no_grad() if mode == "no_grad" else torch.enable_grad()
    with grad:
        thunk()
        counter = StepCounter(("benchmarks/tools.py", "/torch/"),
                              lambda path: "torch" if "/torch/" in path else "noting")
        with counter:
            thunk()
    return counter.counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--modes", nargs="*", default=["grad", "no_grad"])
    parser.add_argument("--ops", nargs="*", default=["torch", "autograd"])
    options = parser.parse_args(argv)
    sys.path[:0] = [str(HERE)]
    import torch

    events = options.blocks * 5 + 1  # 3 calls and 2 ops per block, and the Sequential
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}; a chain of "
          f"{options.blocks} blocks ({events} events); interpreter steps per event")
    print(f"{'recorder':22s}{'mode':>8s}" + "".join(f"{name:>10s}" for name in PHASES)
          + f"{'total':>10s}{'torch':>10s}")
    for mode in options.modes:
        for ops in options.ops:
            if ops == "autograd" and mode == "no_grad":
                continue  # the autograd view records nothing without autograd
            counts = count_recording(options.blocks, mode, ops)
            own = sum(counts[name] for name in PHASES)
            print(f"{'ops=' + repr(ops):22s}{mode:>8s}"
                  + "".join(f"{counts[name] / events:10.0f}" for name in PHASES)
                  + f"{own / events:10.0f}{counts['torch'] / events:10.0f}")
        noting = count_noting(options.blocks, mode)
        print(f"{'floor:noting':22s}{mode:>8s}{'':10s}{noting['noting'] / events:10.0f}"
              f"{'':20s}{noting['noting'] / events:10.0f}{noting['torch'] / events:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
