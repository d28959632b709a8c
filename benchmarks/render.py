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
# the checkout's own torchgraphrec (an editable install elsewhere would be measured instead,
# its page driven by this checkout's test helpers), then tests (its report/ package)
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]


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
    if sys.argv[1:] == ["--report"]:  # the report in the browser only
        in_browser()
        return 0
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


def _big_models() -> dict[str, tuple[Any, list[tuple[str, Any]], list[str]]]:
    """name -> (recording, the actions timed, search words for the walk)."""
    import torch

    import torchgraphrec
    from llama import gpt2_tiny, hf_llama_meta
    from models import resnet50_like

    with hf_llama_meta() as case, torch.no_grad():
        llama = torchgraphrec.record(*case)
    gpt2 = torchgraphrec.record(*gpt2_tiny())
    resnet = resnet50_like()
    resnet = torchgraphrec.record(resnet.model.eval(), resnet.args, resnet.kwargs)
    return {"Llama-3-70B (HF, meta)": (llama, _actions("model.layers", "self_attn.q_proj", 41),
                                       ["q_proj", "mlp", "layers.41", "rotary", "norm"]),
            "GPT-2 (3 layers, 64 wide)": (gpt2, _actions("h", "attn.c_attn", 2),
                                          ["c_proj", "attn", "ln_", "mlp", "add"]),
            "ResNet-50 (64×64 input)": (resnet, _actions("layers.2", "conv2", 4, first=1,
                                                      found="conv3"),
                                    ["conv", "bn", "relu", "downsample", "add"])}


def _actions(blocks: str, inner: str, later: int, first: int = 0,
             found: str = "mlp") -> list[tuple[str, Any]]:
    """A reader's first actions: open a module inside the folded run (in its first block,
    ``blocks.first``, only) and close it, unfold the run, open block ``later`` and a module
    in it, close the block, then search for ``found`` in another block and step to it."""
    from report.reportpage import ROOT, act, open_where_it_is as open_in_place

    def search(page: Any) -> int:
        page.fill(f"{ROOT} .tgr-search", f"{blocks}.{later - 1}.{found}")
        return act(page, page.press, f"{ROOT} .tgr-search", "Enter")

    leader, block = f"layer:{blocks}.{first}#0", f"layer:{blocks}.{later}#0"
    inside = f"layer:{blocks}.{first}.{inner}#0"
    return [("open in folded", lambda page: open_in_place(page, inside)),
            ("close it", lambda page: open_in_place(page, inside)),
            ("unfold", lambda page: open_in_place(page, leader)),
            (f"open {later}", lambda page: open_in_place(page, block)),
            ("open inside", lambda page: open_in_place(page, f"layer:{blocks}.{later}.{inner.split('.')[0]}#0")),
            (f"close {later}", lambda page: open_in_place(page, block)),
            ("search step", search)]


def in_browser() -> None:
    """The report in headless Chromium: size, first drawing, a reader's actions, and a walk
    of 200 random actions counting the states where nothing drawn is in view."""
    import tempfile

    from report.browser import launch, missing
    from report.reportpage import loaded_report, measure
    from report.walk import settle, walk

    if missing():
        print(f"\nreport in the browser: skipped ({missing()})")
        return
    print("\nReport in headless Chromium: ms from navigation (paint: the first drawing) and "
          "from the reader's input to the painted drawing; median of 3 loads")
    models = _big_models()  # recorded before the browser starts
    with tempfile.TemporaryDirectory() as folder, launch() as browser:
        for name, (recording, actions, words) in models.items():
            path = Path(folder) / "report.html"
            seconds = median_time(lambda: recording.render(path), 1)
            print(f"{name}: {path.stat().st_size / 1e6:.2f} MB, written in {seconds:.2f} s, "
                  f"{recording.graph.number_of_nodes():,} nodes")
            runs = [measure(browser, path, actions, fit=False) for _ in range(3)]
            print("  " + " | ".join(f"{label} {statistics.median(r[label] for r in runs):.0f}"
                                    for label in runs[0]))
            with loaded_report(browser, path, fit=False) as loaded:
                settle(loaded.page)
                start = time.perf_counter()
                done = walk(loaded.page, 200, words, seed=22)
                print(f"  walk of 200 random actions: {len(done.blank)} blank states, "
                      f"{len(done.lost)} with the element acted on out of view, "
                      f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
