"""Capture cost of torchgraphrec and its peers, as ratios to the plain forward, side by side.

Strict by construction, so that no tool is flattered:

* every (tool, model, grad mode) cell runs in a fresh interpreter (peers patch torch or
  leave hooks behind, and a warm allocator or import cache would favour later cells);
* one thread (``torch.set_num_threads(1)``), the model in eval mode;
* each sample is one call, preceded by ``gc.collect()``, and plain forwards and captures
  alternate sample by sample, so that drift (another process, thermal state) hits both;
* a process's ratio is its median capture time divided by its median plain forward time,
  and a cell is the median of ``--processes`` (5) fresh processes' ratios, shown with
  their spread (lowest–highest).

Columns: each tool with autograd on (``grad``) and under ``torch.no_grad()`` (``no_grad``),
and on request under ``torch.inference_mode()`` (``--modes inference``);
``torchgraphrec+flops`` records with ``flops=True`` beside ``FlopCounterMode``, PyTorch's
own counter, in the same run; ``torchgraphrec+memory`` with ``memory=True`` (saved bytes
counted); ``floor:*`` are no-op hooks and modes, what any hook- or
mode-based recorder pays before doing anything, and ``floor:noting`` the same hooks and mode
only appending what each call and op took and made to lists (the least a Python recorder
of every op does, before naming or building a graph); ``floor:noting+saved`` adds no-op
saved-tensor hooks (grad mode: what counting saved bytes needs); ``floor:graph``
(``floorgraph.py``) is the least a recorder does that returns a true graph of the same
ops, params, calls and values between them, each part in its cheapest form: noting plus
versions after each op, producers, the recorder's own time taken off, tensor nodes at
call boundaries and a ``networkx`` graph built in one pass; ``floor:schema``
(``floorschema.py``) the least a recorder does that returns torchgraphrec's own graph
(its ids and every attribute the schema requires); ``+saved`` adds saved-tensor hooks
that hand each tensor back. ``--clock thread``
measures the thread's CPU time instead of wall time (for a machine shared with other work:
it is blind to time the process spends descheduled, which on an idle machine is the same).
``--no-collect`` leaves out the ``gc.collect()`` before each sample, a diagnostic, not a
result: the collector's pass over the heap leaves the caches cold for what runs next, and
the difference between the two runs is what the cold caches cost each tool.
A peer that raises is shown as ``FAIL:<exception>``; one not installed as ``-``
(``pip install -e ".[bench]"``).

    python benchmarks/capture.py                          # everything (about two hours)
    python benchmarks/capture.py --models mlp_deep_200 gpt2_small --tools torchgraphrec
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
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
MODES = ("grad", "no_grad", "inference")
#: The grad modes run unless ``--modes`` says otherwise (``inference``: under
#: ``torch.inference_mode()``, whose tensors keep no version counter).
DEFAULT_MODES = ("grad", "no_grad")
#: The capture targets: (model, grad mode, tool) -> the highest ratio allowed.
TARGETS = {
    ("mlp_deep_200", "grad", "torchgraphrec"): 4.5,
    ("mlp_deep_200", "no_grad", "torchgraphrec"): 4.5,
    ("resnet50_like", "grad", "torchgraphrec"): 1.2,
    ("gpt2_small", "grad", "torchgraphrec"): 1.2,
    ("resnet50_like", "no_grad", "torchgraphrec"): 1.15,
    ("gpt2_small", "no_grad", "torchgraphrec"): 1.15,
    ("resnet50_like", "grad", "torchgraphrec+flops"): 1.5,
    ("gpt2_small", "grad", "torchgraphrec+flops"): 1.5,
}
#: ``ops="autograd"`` (the autograd graph and module calls) against torchviz (the autograd
#: graph): at most this times its ratio.
AUTOGRAD_VS_TORCHVIZ = 1.05
#: under ``no_grad``, torchgraphrec's overhead (ratio - 1) against torchview's (which records
#: the same module calls, ops and tensors)
TORCHVIEW_SHARE = 0.2
#: Where ``flops=True`` must stay below FlopCounterMode alone.
FLOPS_MODELS = ("resnet50_like", "gpt2_small")
PEERS = ("torchviz", "torchview", "torchlens", "torchrecorder")


def measure(tool: str, model_name: str, mode: str, budget_s: float, clock: str,
            collect: bool = True) -> dict:
    """Run in the child process: time one tool on one model in one grad mode."""
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    from tools import BENCH_MODELS, TOOLS

    now: Callable[[], int] = time.thread_time_ns if clock == "thread" else time.perf_counter_ns
    case = BENCH_MODELS[model_name]()
    model = case.model.eval()
    plain = lambda: model(*case.args, **case.kwargs)  # noqa: E731
    grad_mode = {"no_grad": torch.no_grad, "inference": torch.inference_mode}.get(
        mode, torch.enable_grad)()
    with grad_mode:
        try:
            capture = TOOLS[tool](model, case.args, case.kwargs)
            for _ in range(2):  # warm-up: lazy imports, allocator, caches
                plain()
                capture()
        except ModuleNotFoundError:
            return {"status": "missing"}
        except Exception as exc:  # a peer's crash is a result, not an error of the harness
            return {"status": f"FAIL:{type(exc).__name__}", "detail": str(exc)[:200]}
        plain_ns, capture_ns = [], []
        start = time.perf_counter()
        while len(capture_ns) < 7 or (time.perf_counter() - start < budget_s
                                      and len(capture_ns) < 41):
            plain_ns.append(_one_call(plain, now, collect))
            capture_ns.append(_one_call(capture, now, collect))
    forward, captured = statistics.median(plain_ns), statistics.median(capture_ns)
    return {"status": "ok", "forward_ms": forward / 1e6, "capture_ms": captured / 1e6,
            "ratio": captured / forward, "samples": len(capture_ns),
            "module_calls": _count_calls(model, case)}


def _one_call(thunk: Callable[[], Any], now: Callable[[], int], collect: bool = True) -> int:
    """Nanoseconds of one call of ``thunk``, the garbage of earlier calls collected first."""
    if collect:
        gc.collect()
    start = now()
    thunk()
    return now() - start


def _count_calls(model: Any, case: Any) -> int:
    calls = []
    handles = [m.register_forward_pre_hook(lambda *_: calls.append(1)) for m in model.modules()]
    model(*case.args, **case.kwargs)
    for handle in handles:
        handle.remove()
    return len(calls)


def run_cell(tool: str, model_name: str, mode: str, options: argparse.Namespace) -> dict:
    """:func:`run_child` in ``options.processes`` fresh interpreters: the median ratio, and
    the lowest and highest (a failure in any process is the cell's result)."""
    runs = []
    for _ in range(options.processes):
        result = run_child(tool, model_name, mode, options)
        if result["status"] != "ok":
            return result
        runs.append(result)
    ratios = sorted(run["ratio"] for run in runs)
    middle = sorted(runs, key=lambda run: run["ratio"])[len(runs) // 2]
    return {**middle, "ratio": statistics.median(ratios), "low": ratios[0],
            "high": ratios[-1], "processes": len(runs)}


def run_child(tool: str, model_name: str, mode: str, options: argparse.Namespace) -> dict:
    """Run :func:`measure` in a fresh interpreter and parse its JSON line."""
    command = [sys.executable, str(Path(__file__)), "--child", tool, model_name, mode,
               "--budget", str(options.budget), "--clock", options.clock] \
        + ([] if options.collect else ["--no-collect"])
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=options.timeout, cwd=HERE)
    except subprocess.TimeoutExpired:
        return {"status": "TIMEOUT"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"status": f"FAIL:exit {done.returncode}", "detail": done.stderr[-300:]}


def cell(result: Optional[dict]) -> str:
    if result is None:
        return ""
    status = result["status"]
    if status == "ok" and result.get("processes", 1) > 1:
        return f"{result['ratio']:.2f}x ({result['low']:.2f}-{result['high']:.2f})"
    if status == "ok":
        return f"{result['ratio']:.2f}x"
    return "-" if status == "missing" else status[:18]


Results = dict[tuple[str, str, str], dict]  # (model, mode, tool) -> result


def report(results: Results, models: list[str], tools: list[str]) -> None:
    """One row per model and grad mode, one column per tool."""
    widths = {tool: 2 + max(len(tool), *(len(cell(r)) for (_, _, t), r in results.items()
                                         if t == tool)) for tool in tools}
    print(f"\n{'model':24s}{'fwd ms':>9s}{'calls':>7s}"
          + "".join(f"{tool:>{widths[tool]}s}" for tool in tools))
    for model_name in models:
        for mode in MODES:
            row = {t: r for (m, md, t), r in results.items() if m == model_name and md == mode}
            if not row:
                continue
            base = next((r for r in row.values() if r["status"] == "ok"), None)
            forward = f"{base['forward_ms']:.2f}" if base else "?"
            calls = str(base["module_calls"]) if base else "?"
            print(f"{model_name + ' ' + mode:24s}{forward:>9s}{calls:>7s}"
                  + "".join(f"{cell(row.get(tool)):>{widths[tool]}s}" for tool in tools))
    _report_targets(results, models)


def _ratio(results: Results, key: tuple[str, str, str]) -> Optional[float]:
    result = results.get(key)
    return result["ratio"] if result and result["status"] == "ok" else None


def _floor_note(results: Results, model_name: str, mode: str, tool: str,
                target: float) -> str:
    """Where the default's target stands against the floors the run measured,
    ``floor:graph`` and ``floor:schema`` (without saved-tensor hooks: the default counts no
    saved bytes)."""
    if tool != "torchgraphrec":
        return ""
    notes = []
    for floor_tool in ("floor:graph", "floor:schema"):
        floor = _ratio(results, (model_name, mode, floor_tool))
        if floor is not None:
            where = "below" if target < floor else "above"
            notes.append(f"; {floor_tool} {floor:.2f}x: the target is {where} it")
    return "".join(notes)


def _report_memory(results: Results, models: list[str]) -> None:
    """What ``memory=True`` costs beside the default, and beside its floor (the schema's
    with saved-tensor hooks that hand each tensor back)."""
    for model_name in models:
        memory = _ratio(results, (model_name, "grad", "torchgraphrec+memory"))
        if memory is None:
            continue
        found = [f"{memory:.2f}x"]
        for tool in ("torchgraphrec", "floor:schema+saved"):
            ratio = _ratio(results, (model_name, "grad", tool))
            if ratio is not None:
                found.append(f"{tool} {ratio:.2f}x")
        print(f"  memory=True {model_name} grad: " + "; ".join(found))


def _report_targets(results: Results, models: list[str]) -> None:
    print("\nTargets:")
    for (model_name, mode, tool), target in TARGETS.items():
        ratio = _ratio(results, (model_name, mode, tool))
        if ratio is not None:
            verdict = "met" if ratio <= target else "NOT met"
            print(f"  {tool} {model_name} {mode}: {ratio:.2f}x (<= {target}x) {verdict}"
                  + _floor_note(results, model_name, mode, tool, target))
    _report_memory(results, models)
    for model_name in FLOPS_MODELS:
        flops = _ratio(results, (model_name, "grad", "torchgraphrec+flops"))
        counter = _ratio(results, (model_name, "grad", "flop_counter"))
        if flops is not None and counter is not None:
            verdict = "met" if flops < counter else "NOT met"
            print(f"  flops=True {model_name}: {flops:.2f}x vs FlopCounterMode "
                  f"{counter:.2f}x (below it) {verdict}")
    for model_name in models:
        mine = _ratio(results, (model_name, "grad", "torchgraphrec+autograd"))
        torchviz = _ratio(results, (model_name, "grad", "torchviz"))
        if mine is not None and torchviz is not None:
            verdict = "met" if mine <= AUTOGRAD_VS_TORCHVIZ * torchviz else "NOT met"
            floor = _ratio(results, (model_name, "grad", "floor:calls+torchviz"))
            where = "" if floor is None else \
                f"; floor:calls+torchviz {floor / torchviz:.2f}x torchviz's: the target is " \
                f"{'below' if AUTOGRAD_VS_TORCHVIZ * torchviz < floor else 'above'} it"
            print(f"  ops='autograd' {model_name}: {mine:.2f}x vs torchviz {torchviz:.2f}x "
                  f"(<= {AUTOGRAD_VS_TORCHVIZ}x it) {verdict}{where}")
    for model_name in models:
        for mode in MODES:
            _report_peers(results, model_name, mode)


def _report_peers(results: Results, model_name: str, mode: str) -> None:
    mine = _ratio(results, (model_name, mode, "torchgraphrec"))
    if mine is None:
        return
    faster = [peer for peer in PEERS
              if (theirs := _ratio(results, (model_name, mode, peer))) is not None
              and theirs < mine]
    if faster:
        print(f"  {model_name} {mode}: slower than {', '.join(faster)}")
    torchview = _ratio(results, (model_name, mode, "torchview"))
    if mode == "no_grad" and torchview is not None:
        share = (mine - 1) / max(torchview - 1, 1e-9)
        verdict = "met" if share <= TORCHVIEW_SHARE else "NOT met"
        floor = _ratio(results, (model_name, mode, "floor:schema"))
        where = "" if floor is None else \
            f"; floor:schema {(floor - 1) / max(torchview - 1, 1e-9):.2f} of it: the target is " \
            f"{'below' if floor - 1 > TORCHVIEW_SHARE * (torchview - 1) else 'above'} it"
        print(f"  {model_name} no_grad: overhead {share:.2f} of torchview's "
              f"(<= {TORCHVIEW_SHARE}) {verdict}{where}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--tools", nargs="*")
    parser.add_argument("--modes", nargs="*", choices=MODES, default=list(DEFAULT_MODES))
    parser.add_argument("--budget", type=float, default=4.0, help="seconds of timing per cell")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per cell")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall")
    parser.add_argument("--no-collect", dest="collect", action="store_false",
                        help="no gc.collect() before each sample (a diagnostic: the "
                             "collector's pass leaves the caches cold for what runs next)")
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh processes per cell (the cell is their median)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--report", type=Path, help="print the table of a --json file again")
    parser.add_argument("--child", nargs=3, metavar=("TOOL", "MODEL", "MODE"),
                        help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
    if options.child:
        print(json.dumps(measure(*options.child, options.budget, options.clock,
                                 options.collect)))
        return 0
    from tools import BENCH_MODELS, GRAD_ONLY, TOOLS

    if options.report:
        saved = json.loads(options.report.read_text())
        results = {tuple(key.split(" / ")): value for key, value in saved.items()}
        report(results, list(dict.fromkeys(m for m, _, _ in results)),
               list(dict.fromkeys(t for _, _, t in results)))
        return 0
    import torch

    print(f"torch {torch.__version__}, {options.processes} processes per cell, "
          f"{options.clock} clock" + ("" if options.collect else ", no gc.collect()"),
          flush=True)
    models = options.models or list(BENCH_MODELS)
    tools = options.tools or list(TOOLS)
    results: Results = {}
    for model_name in models:
        for tool in tools:
            for mode in options.modes:
                if mode != "grad" and tool in GRAD_ONLY:
                    continue
                print(f"  {model_name} / {tool} / {mode} ...", file=sys.stderr, flush=True)
                results[model_name, mode, tool] = run_cell(tool, model_name, mode, options)
    report(results, models, tools)
    if options.json:
        options.json.write_text(json.dumps({" / ".join(key): value
                                            for key, value in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
