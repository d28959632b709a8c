"""Render speed: torchgraphrec's DOT emission and SVG, beside torchview's and torchrecorder's.

    python benchmarks/render.py

Also the HTML report of GPT-2 small and of the Llama-3-70B-shaped model (on the meta
device): its size, the time to write it, and in headless Chromium (Debian's, through
playwright) the first drawing, the page ready, and a reader's first actions (show a folded
run's repeats, open a block in place, close it, show tensors), each from the input event
to the painted drawing. Times are medians (seconds) of the rendering step alone, after a
capture that is not timed.
The peers' Graphviz calls are pointed at graphviz-pure, the engine torchgraphrec uses, so
that layout engines do not differ. Targets: DOT for the 1,000-layer MLP's full graph
(about 7,000 nodes) under 0.5 s; GPT-2 small at default options to SVG under 1 s.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE)]  # tests first: its render/ package


def median_time(thunk: Callable[[], Any], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        thunk()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _use_graphviz_pure() -> None:
    import graphviz.backend.dot_command as dot_command

    from torchgraphrec.render.engine import resolve_engine

    dot_command.DOT_BINARY = Path(resolve_engine("svg").path)


def ours(case: Any, **options: Any) -> dict[str, float]:
    import torchgraphrec
    from torchgraphrec.render.engine import run_engine

    recording = torchgraphrec.record(case.model.eval(), case.args, case.kwargs)
    dot = recording.to_dot(**options)
    svg = run_engine(dot, "svg").decode()
    height = float(re.search(r'height="([\d.]+)pt"', svg).group(1)) / 72 * 96 / 1080
    return {"dot": median_time(lambda: recording.to_dot(**options)),
            "svg": median_time(lambda: run_engine(recording.to_dot(**options), "svg"), 3),
            "nodes": dot.count("label="), "screens": height}


def torchview_render(case: Any) -> float:
    from torchview import draw_graph

    graph = draw_graph(case.model, input_data=list(case.args), depth=3, **case.kwargs)
    return median_time(lambda: graph.visual_graph.pipe(format="svg"), 3)


def torchrecorder_render(case: Any) -> float:
    import torchrecorder

    if case.kwargs:
        raise TypeError("torchrecorder takes no keyword arguments")
    recording = torchrecorder.record(case.model, "net", None, input_data=case.args)
    return median_time(lambda: torchrecorder.make_dot(recording).pipe(format="svg"), 3)


def peer(render: Callable[[Any], float], case: Any) -> str:
    try:
        return f"{render(case):.2f}s"
    except ModuleNotFoundError:
        return "-"
    except Exception as exc:  # a peer's failure is a result
        return f"FAIL:{type(exc).__name__}"


def main() -> int:
    import torch

    import models
    from tools import BENCH_MODELS

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    _use_graphviz_pure()
    cases = {"mlp_deep_1000": BENCH_MODELS["mlp_deep_1000"], "resnet50_like":
             BENCH_MODELS["resnet50_like"], "gpt2_small": BENCH_MODELS["gpt2_small"]}
    print(f"{'model':16s}{'options':14s}{'nodes':>7s}{'DOT s':>8s}{'SVG s':>8s}{'screens':>9s}"
          f"{'torchview':>11s}{'torchrecorder':>19s}")
    for name, make in cases.items():
        for label, options in (("default", {}), ("no folding", {"fold_repeats": False})):
            result = ours(make(), **options)
            # a fresh model per peer: torchrecorder leaves its hooks behind when it fails
            view = peer(torchview_render, make()) if label == "default" else ""
            recorder = peer(torchrecorder_render, make()) if label == "default" else ""
            print(f"{name:16s}{label:14s}{result['nodes']:>7d}{result['dot']:>8.3f}"
                  f"{result['svg']:>8.2f}{result['screens']:>9.1f}{view:>11s}{recorder:>19s}")
    report(cases["gpt2_small"]())
    del models
    return 0


def report(case: Any) -> None:
    """The GPT-2 small HTML report: write time and size (targets: under 3 s, under 5 MB)."""
    import tempfile

    import torchgraphrec

    recording = torchgraphrec.record(case.model.eval(), case.args, case.kwargs, backward=True)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gpt2.html"
        seconds = median_time(lambda: recording.render(path), 3)
        size = path.stat().st_size
    print(f"\nGPT-2 small HTML report: {seconds:.2f} s to write, {size / 1e6:.2f} MB "
          f"(targets: under 3 s, under 5 MB)")
    in_browser()


def _big_models() -> dict[str, tuple[Any, tuple[str, str], float]]:
    """name -> (recording, (run leader, block to open), most ms per action)."""
    import torch

    import torchgraphrec
    from llama import llama_meta
    from render.test_report_big import gpt2_small_meta

    with torch.no_grad():
        llama = torchgraphrec.record(*llama_meta())
    gpt2 = torchgraphrec.record(*gpt2_small_meta())
    return {"Llama-3-70B (meta)": (llama, ("layer:layers.0#0", "layer:layers.40#0"), 1000),
            "GPT-2 small (meta)": (gpt2, ("layer:h.0#0", "layer:h.5#0"), 500)}


def in_browser() -> None:
    """The report in headless Chromium: size, first drawing, and a reader's first actions."""
    import tempfile

    from render.browser import launch, missing
    from render.reportpage import big_model_actions, measure

    if missing():
        print(f"\nreport in the browser: skipped ({missing()})")
        return
    print("\nReport in headless Chromium (ms; first drawing target 2000, actions 1000 for "
          "Llama, 500 for GPT-2)")
    with tempfile.TemporaryDirectory() as folder, launch() as browser:
        for name, (recording, (leader, block), most) in _big_models().items():
            path = Path(folder) / "report.html"
            seconds = median_time(lambda: recording.render(path), 1)
            print(f"{name}: {path.stat().st_size / 1e6:.2f} MB, written in {seconds:.2f} s, "
                  f"{recording.graph.number_of_nodes():,} nodes")
            for run in range(3):
                times = measure(browser, path, big_model_actions(leader, block))
                print(f"  run {run + 1}: " + ", ".join(
                    f"{label} {value:.0f}" for label, value in times.items()))
            print(f"  (each action within {most} ms)")


if __name__ == "__main__":
    sys.exit(main())
