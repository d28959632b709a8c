"""Capture cost of torchgraphrec and its peers, as ratios to the plain forward, side by side.

Every (tool, model) pair runs in a fresh subprocess (peers patch torch or leave hooks
behind), on one thread, with the model in eval mode and autograd on. Plain forwards and
captures are timed in alternating blocks of back-to-back calls (about 50 ms or at least two
calls each) with the garbage collector on, and a cell is the median capture time per call
divided by the median plain forward time per call. Blocks make every tool pay for the
collections its own garbage triggers: with single calls alternating, a tool that leaves
much garbage hands its collections to the plain forward timed next, which flatters its
ratio (torchviz on GPT-2 measured 1.01x that way, 1.20x with a collection before every
call). A peer that raises is shown as ``FAIL:<exception>``; one not installed as
``-`` (``pip install -e ".[bench]"`` installs them).

    python benchmarks/capture.py                       # everything (about 15 minutes)
    python benchmarks/capture.py --models mlp_deep_200 gpt2_small --tools torchgraphrec
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = {"mlp_deep_200": 4.0, "resnet50_like": 1.2, "gpt2_small": 1.2}


def measure(tool: str, model_name: str, budget_s: float) -> dict:
    """Run in the child process: time one tool on one model."""
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    from tools import BENCH_MODELS, TOOLS

    case = BENCH_MODELS[model_name]()
    model = case.model.eval()
    plain = lambda: model(*case.args, **case.kwargs)  # noqa: E731
    try:
        capture = TOOLS[tool](model, case.args, case.kwargs)
        capture()
    except ModuleNotFoundError:
        return {"status": "missing"}
    except Exception as exc:  # a peer's crash is a result, not an error of the harness
        return {"status": f"FAIL:{type(exc).__name__}", "detail": str(exc)[:200]}
    calls = max(2, round(0.05 / max(_per_call(plain, 1), _per_call(capture, 1))))
    plain_times, capture_times = [], []
    start = time.perf_counter()
    while len(capture_times) < 5 or (time.perf_counter() - start < budget_s
                                     and len(capture_times) < 41):
        plain_times.append(_per_call(plain, calls))
        capture_times.append(_per_call(capture, calls))
    forward, captured = statistics.median(plain_times), statistics.median(capture_times)
    return {"status": "ok", "forward_ms": forward * 1e3, "capture_ms": captured * 1e3,
            "ratio": captured / forward, "runs": len(capture_times) * calls,
            "module_calls": _count_calls(model, case)}


def _per_call(thunk, calls: int) -> float:
    """Seconds per call over ``calls`` back-to-back calls of ``thunk``."""
    start = time.perf_counter()
    for _ in range(calls):
        thunk()
    return (time.perf_counter() - start) / calls


def _count_calls(model, case) -> int:
    calls = []
    handles = [m.register_forward_pre_hook(lambda *_: calls.append(1)) for m in model.modules()]
    model(*case.args, **case.kwargs)
    for handle in handles:
        handle.remove()
    return len(calls)


def run_child(tool: str, model_name: str, budget_s: float, timeout_s: float) -> dict:
    """Run :func:`measure` in a fresh interpreter and parse its JSON line."""
    command = [sys.executable, str(Path(__file__)), "--child", tool, model_name,
               "--budget", str(budget_s)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              cwd=HERE)
    except subprocess.TimeoutExpired:
        return {"status": "TIMEOUT"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"status": f"FAIL:exit {done.returncode}", "detail": done.stderr[-300:]}


def cell(result: dict) -> str:
    status = result["status"]
    if status == "ok":
        return f"{result['ratio']:.2f}x"
    return "-" if status == "missing" else status


def report(results: dict[str, dict[str, dict]], tools: list[str]) -> None:
    cells = {model_name: {t: cell(row[t]) for t in tools} for model_name, row in results.items()}
    widths = {t: 2 + max([len(t)] + [len(row[t]) for row in cells.values()]) for t in tools}
    print(f"\n{'model':18s}{'fwd ms':>9s}{'calls':>7s}" + "".join(f"{t:>{widths[t]}s}" for t in tools))
    for model_name, row in results.items():
        base = next((r for r in row.values() if r["status"] == "ok"), None)
        forward = f"{base['forward_ms']:.2f}" if base else "?"
        calls = str(base["module_calls"]) if base else "?"
        print(f"{model_name:18s}{forward:>9s}{calls:>7s}"
              + "".join(f"{cells[model_name][t]:>{widths[t]}s}" for t in tools))
    _report_targets(results)
    _report_scaling(results)


def _report_targets(results: dict[str, dict[str, dict]]) -> None:
    print("\nTargets (torchgraphrec):")
    for model_name, target in TARGETS.items():
        mine = results.get(model_name, {}).get("torchgraphrec")
        if mine and mine["status"] == "ok":
            verdict = "met" if mine["ratio"] <= target else "NOT met"
            print(f"  {model_name}: {mine['ratio']:.2f}x (target <= {target}x) {verdict}")
    for model_name, row in results.items():
        mine = row.get("torchgraphrec", {})
        if mine.get("status") != "ok":
            continue
        beaten_by = [t for t, r in row.items() if not t.startswith(("floor", "torchgraphrec"))
                     and r["status"] == "ok" and r["ratio"] < mine["ratio"]]
        if beaten_by:
            print(f"  {model_name}: slower than {', '.join(beaten_by)}")


def _report_scaling(results: dict[str, dict[str, dict]]) -> None:
    small = results.get("mlp_deep_200", {}).get("torchgraphrec", {})
    large = results.get("mlp_deep_1000", {}).get("torchgraphrec", {})
    if small.get("status") == large.get("status") == "ok":
        import math

        k = math.log(large["capture_ms"] / small["capture_ms"]) / math.log(
            large["module_calls"] / small["module_calls"])
        print(f"\nScaling 200 -> 1000 layers: capture time ~ calls^{k:.2f} (1.0 is linear)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--tools", nargs="*")
    parser.add_argument("--budget", type=float, default=5.0, help="seconds of timing per cell")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per cell")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "MODEL"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
    if options.child:
        print(json.dumps(measure(*options.child, options.budget)))
        return 0
    from tools import BENCH_MODELS, TOOLS

    model_names = options.models or list(BENCH_MODELS)
    tools = options.tools or list(TOOLS)
    results: dict[str, dict[str, dict]] = {}
    for model_name in model_names:
        results[model_name] = {}
        for tool in tools:
            print(f"  {model_name} / {tool} ...", file=sys.stderr, flush=True)
            results[model_name][tool] = run_child(tool, model_name, options.budget,
                                                  options.timeout)
    report(results, tools)
    return 0


if __name__ == "__main__":
    sys.exit(main())
