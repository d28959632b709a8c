"""Where the capture time goes, per event: microseconds per op and per module call, ours beside the floors.

Two synthetic models isolate the two kinds of event: ``ops``, one module whose forward runs
``--ops`` small elementwise ops (so that each op's own compute is negligible), and ``calls``,
a chain of ``--calls`` ``nn.Identity`` modules (no op at all). Each tool records each model in
a fresh process, plain runs and captures interleaved, ``gc.collect()`` before each sample,
one thread; the figure is (median capture − median plain) / events, in microseconds: what
one more event costs, with everything a recording does after the forward (naming, building
the graph) spread over the events. ``floor:*`` are the floors of ``capture.py``.

    python benchmarks/events.py
    python benchmarks/events.py --tools torchgraphrec floor:noting --modes grad
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
MODES = ("grad", "no_grad")
DEFAULT_TOOLS = ("torchgraphrec", "floor:hooks+mode", "floor:noting", "floor:noting+saved")


def _models(ops: int, calls: int) -> dict[str, Callable[[], Any]]:
    import torch
    from torch import nn

    class Ops(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(ops):
                x = x + 1
            return x

    def chain() -> Any:
        return nn.Sequential(*(nn.Identity() for _ in range(calls)))

    def ops_input() -> torch.Tensor:
        return torch.ones(4, requires_grad=True)

    return {"ops": lambda: (Ops(), ops_input(), ops), "calls": lambda: (chain(), ops_input(),
                                                                          calls + 1)}


def measure(tool: str, model_name: str, mode: str, ops: int, calls: int,
            samples: int, clock: str = "wall") -> dict:
    """In the child process: microseconds per event of one tool on one model."""
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    from tools import TOOLS

    now = time.thread_time_ns if clock == "thread" else time.perf_counter_ns
    model, x, events = _models(ops, calls)[model_name]()
    plain = lambda: model(x)  # noqa: E731
    with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
        capture = TOOLS[tool](model, (x,), {})
        for _ in range(2):
            plain()
            capture()
        plain_ns, capture_ns = [], []
        for _ in range(samples):
            plain_ns.append(_one_call(plain, now))
            capture_ns.append(_one_call(capture, now))
    extra = statistics.median(capture_ns) - statistics.median(plain_ns)
    return {"us_per_event": extra / events / 1e3, "events": events,
            "plain_us_per_event": statistics.median(plain_ns) / events / 1e3}


def _one_call(thunk: Callable[[], Any], now: Callable[[], int]) -> int:
    gc.collect()
    start = now()
    thunk()
    return now() - start


def run_child(tool: str, model_name: str, mode: str, options: argparse.Namespace) -> dict:
    command = [sys.executable, str(Path(__file__)), "--child", tool, model_name, mode,
               "--ops", str(options.ops), "--calls", str(options.calls),
               "--samples", str(options.samples), "--clock", options.clock]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=HERE)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": done.stderr[-300:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", nargs="*", default=list(DEFAULT_TOOLS))
    parser.add_argument("--modes", nargs="*", choices=MODES, default=list(MODES))
    parser.add_argument("--ops", type=int, default=4000)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall",
                        help="thread: the thread's CPU time (steadier on a loaded machine)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    # the checkout this file is in, not whichever torchgraphrec is installed
    sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "tests")]
    if options.child:
        tool, model_name, mode = options.child
        print(json.dumps(measure(tool, model_name, mode, options.ops, options.calls,
                                 options.samples, options.clock)))
        return 0
    import torch

    import torchgraphrec

    print(f"torch {torch.__version__}; torchgraphrec from {Path(torchgraphrec.__file__).parent}; "
          f"µs per event above the plain forward ({options.ops} ops; {options.calls} calls; "
          f"{options.clock} clock)")
    print(f"{'tool':24s}{'mode':>9s}{'per op':>10s}{'per call':>10s}")
    for tool in options.tools:
        for mode in options.modes:
            found = {name: run_child(tool, name, mode, options) for name in ("ops", "calls")}
            cells = [f"{found[name]['us_per_event']:.2f}" if "us_per_event" in found[name]
                     else "FAIL" for name in ("ops", "calls")]
            print(f"{tool:24s}{mode:>9s}{cells[0]:>10s}{cells[1]:>10s}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
