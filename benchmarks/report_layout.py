"""Spike for issue 14: laying out report drawings in the browser with viz-js (Graphviz in wasm).

    python benchmarks/report_layout.py            # everything (about 5 minutes)
    python benchmarks/report_layout.py --quick    # GPT-2 only

Each page inlines the vendored viz-js, a drawing description from ``report_data.py`` and
``report_layout.js``, and runs in headless Chromium (Debian's, through playwright). Times
are milliseconds: ``first`` from navigation start to the first drawing painted (page and
script load, wasm start, layout, SVG parse, insertion, paint); every other row is a
re-layout (compose DOT in JS, layout, parse, insert, paint), median of 3. Also: the same DOT
through graphviz-pure (same SVG?), labels wider than their box in Chromium's fonts, the
largest drawing laid out within 1 s and 2 s, and the size of the data a page would carry.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE)]  # tests first: its render/ package

_COMMENT = re.compile(r"<!--.*?-->\n?", re.S)


def _script(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def spike_page(config: dict[str, Any], drawing: Any = None, static_svg: str = "") -> str:
    """A page that runs ``spikeMain(config)``; ``static_svg`` is shown before viz-js loads."""
    from torchgraphrec.render.vendor import viz_js

    data = f'<script type="application/json" id="drawing">{_script(drawing)}</script>' \
        if drawing is not None else ""
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>spike</title></head>"
            f"<body><div id=\"static\">{static_svg}</div><div id=\"host\"></div>{data}"
            "<script>requestAnimationFrame(() => requestAnimationFrame(() => "
            "{ window.__tStatic = performance.now(); }));</script>"
            f"<script>{viz_js().text}</script>"
            "<script>window.__tVizEval = performance.now();</script>"
            f"<script>{(HERE / 'report_layout.js').read_text()}</script>"
            f"<script>spikeMain({_script(config)});</script></body></html>")


def run_page(browser: Any, html: str, folder: Path, timeout_s: float = 600) -> dict[str, Any]:
    from render.browser import open_page

    path = folder / f"spike{len(list(folder.iterdir()))}.html"
    path.write_text(html, encoding="utf-8")
    with open_page(browser, path) as loaded:
        loaded.page.wait_for_function("window.__result !== undefined", timeout=timeout_s * 1000)
        result = loaded.page.evaluate("window.__result")
        result["static"] = loaded.page.evaluate("window.__tStatic")
    if loaded.problems:
        raise RuntimeError(f"the spike page reported errors: {loaded.problems[:3]}")
    result["pageBytes"] = len(html.encode())
    return result


def record(case: Any, grad: bool = True) -> Any:
    import contextlib

    import torch

    import torchgraphrec

    with contextlib.nullcontext() if grad else torch.no_grad():
        return torchgraphrec.record(case.model, case.args, case.kwargs)


def same_svg(ours: str, dot: str) -> str:
    """Whether viz-js's SVG for ``dot`` is graphviz-pure's, comments aside."""
    from torchgraphrec.render.engine import run_engine

    pure = run_engine(dot, "svg").decode()
    a, b = _COMMENT.sub("", ours), _COMMENT.sub("", pure)
    if a == b:
        return "identical"
    lines = sum(x != y for x, y in zip(a.splitlines(), b.splitlines()))
    return f"{lines} lines differ"


def check_composer(result: dict[str, Any], python_dot: str) -> str:
    """The composed DOT against the DOT writer's for the same state."""
    ours = result["dot"]
    if ours == python_dot:
        return "byte-identical"
    parts = []
    patterns = (("nodes and clusters", r'id="([ncg]-[^"]*)"'), ("edges", r'id="(e-[^"]*)"'))
    for what, pattern in patterns:
        found, wanted = set(re.findall(pattern, ours)), set(re.findall(pattern, python_dot))
        parts.append(f"{what}: {len(found & wanted)}/{len(wanted)} shared, "
                     f"{len(found - wanted)} extra")
    return "; ".join(parts)


def row(name: str, r: dict[str, Any]) -> str:
    return (f"{name:44s}{r.get('nodes') or '':>7}{r.get('edges') or '':>7}"
            f"{r['compose']:>9.1f}{r['layout']:>9.1f}{r['parse']:>8.1f}{r['insert']:>8.1f}"
            f"{r['paint']:>8.1f}{r['total']:>9.1f}")


HEADER = (f"{'drawing':44s}{'nodes':>7}{'edges':>7}{'compose':>9}{'layout':>9}{'parse':>8}"
          f"{'insert':>8}{'paint':>8}{'total':>9}")


def gpt2_small() -> Any:
    from tools import BENCH_MODELS

    return BENCH_MODELS["gpt2_small"]()


def measure_model(browser: Any, folder: Path, name: str, graph: Any, first: dict[str, Any],
                  steps: list[dict[str, Any]], checks: dict[str, dict[str, Any]]) -> dict:
    """Run one model's page; print its rows and the composer/engine checks."""
    from report_data import drawing_data

    from torchgraphrec import to_dot

    for step in [first, *steps]:
        step["keep"] = step.get("keep") or step["name"] in checks
    started = time.perf_counter()
    drawing = drawing_data(graph)
    export_s = time.perf_counter() - started
    result = run_page(browser, spike_page({"first": first, "steps": steps}, drawing), folder)
    print(f"\n{name}: drawing data {len(_script(drawing)) / 1e6:.2f} MB (exported in "
          f"{export_s:.2f} s), page {result['pageBytes'] / 1e6:.2f} MB; viz-js script "
          f"evaluated at {result['vizEval']:.0f} ms, Viz.instance() {result['instance']:.0f} ms, "
          f"data parse {result['dataParse']:.0f} ms")
    print(HEADER)
    print(row(f"first: {first['name']}", result["first"])
          + f"   painted at {result['first']['end']:.0f} ms")
    for step, r in result["steps"].items():
        extra = (f"   engine: DOT parse {r['dotParse']:.0f}, parse+layout "
                 f"{r['layoutJson']:.0f}") if "dotParse" in r else ""
        print(row(step, r) + extra)
    for step, options in checks.items():
        r = result["first"] if step == first["name"] else result["steps"][step]
        verdict = check_composer(r, to_dot(graph, **options))
        print(f"  composer vs to_dot({options}) for {step!r}: {verdict}")
        if r.get("svg"):
            print(f"  viz-js vs graphviz-pure SVG for {step!r}: {same_svg(r['svg'], r['dot'])}")
    for step, r in [("first", result["first"]), *result["steps"].items()]:
        if r.get("fonts"):
            f = r["fonts"]
            print(f"  {step}: {f['count']} of {f['total']} label lines wider than their box "
                  f"in Chromium (widest {f['worst']:.2f}x)")
    return result


def static_first(browser: Any, folder: Path, graph: Any, **options: Any) -> dict[str, Any]:
    """The first drawing as today's report shows it: graphviz-pure's SVG inline, viz-js
    loaded after it (to be ready for the first expand)."""
    from torchgraphrec import to_dot
    from torchgraphrec.render.engine import run_engine
    from torchgraphrec.render.html import _inline_svg

    started = time.perf_counter()
    svg = _inline_svg(run_engine(to_dot(graph, **options), "svg"))
    python_s = time.perf_counter() - started
    config = {"first": {"name": "tiny", "dot": "digraph { a }"}, "steps": []}
    result = run_page(browser, spike_page(config, None, svg), folder)
    return {"python_s": python_s, "svg_bytes": len(svg), "static": result["static"],
            "ready": result["first"]["end"]}


def gpt2_section(browser: Any, folder: Path) -> None:
    graph = record(gpt2_small()).graph
    print(f"\nGPT-2 small (GPT2Config(), random weights, seq 16): {len(graph)} nodes recorded")
    first = {"name": "depth 2 (x 12 folded)", "state": {"depth": 2}, "keep": True,
             "svg": True, "fonts": True}
    steps = [
        {"name": "depth 2, open h.0.attn inside x 12",
         "state": {"depth": 2, "openSubtree": ["layer:h.0.attn#0"]}},
        {"name": "depth 2, x 12 opened", "state": {"depth": 2, "unfold": "all"}},
        {"name": "full depth (x 12 folded)", "state": {"depth": None}, "keep": True,
         "svg": True, "fonts": True, "split": True},
        {"name": "x 12 opened, blocks boxed, h.5 open", "split": True,
         "state": {"depth": 1, "unfold": "all", "openSubtree": ["layer:h.5#0"]}},
        {"name": "full depth, x 12 opened (everything)", "split": True,
         "state": {"depth": None, "unfold": "all"}},
    ]
    for step in steps:
        step.setdefault("repeat", 3)
    measure_model(browser, folder, "GPT-2 small", graph, first, steps,
                  {first["name"]: {"depth": 2}, "full depth (x 12 folded)": {}})
    shown = static_first(browser, folder, graph, depth=2)
    print(f"  static first drawing (graphviz-pure SVG inline, depth 2): painted at "
          f"{shown['static']:.0f} ms, viz-js ready at {shown['ready']:.0f} ms; "
          f"{shown['svg_bytes'] / 1e3:.0f} kB of SVG written in {shown['python_s']:.2f} s")


BLOCK_40 = ["layer:layers.40#0"]
LLAMA_STEPS = [
    {"name": "depth 1 (x 80 folded)", "state": {"depth": 1}},
    {"name": "depth 1, x 80 opened (80 boxes)", "state": {"depth": 1, "unfold": "all"}},
    {"name": "x 80 opened, layers.40 open (expand)", "split": True, "fonts": True,
     "state": {"depth": 1, "unfold": "all", "openSubtree": BLOCK_40}},
    {"name": "depth 2, x 80 opened", "split": True, "state": {"depth": 2, "unfold": "all"}},
    {"name": "depth 2, x 80 opened, layers.40 open",
     "state": {"depth": 2, "unfold": "all", "openSubtree": BLOCK_40}},
]


def llama_section(browser: Any, folder: Path, grad: bool) -> Any:
    import llama

    case = llama.llama_meta()
    recording = record(case, grad=grad)
    label = ("grad mode (autograd sees the ops)" if grad
             else "under torch.no_grad() (no ops captured today)")
    print(f"\nLlama-3-70B-shaped on meta, recorded {label}: {recording}")
    first = {"name": "default: full depth, x 80 folded", "state": {"depth": None}, "keep": True,
             "svg": True, "fonts": True}
    steps = [dict(step, repeat=3) for step in LLAMA_STEPS]
    measure_model(browser, folder, "Llama-70B-shaped", recording.graph, first, steps,
                  {first["name"]: {}, "depth 1 (x 80 folded)": {"depth": 1}})
    shown = static_first(browser, folder, recording.graph)
    print(f"  static first drawing (graphviz-pure SVG inline, default): painted at "
          f"{shown['static']:.0f} ms, viz-js ready at {shown['ready']:.0f} ms; "
          f"{shown['svg_bytes'] / 1e3:.0f} kB of SVG written in {shown['python_s']:.2f} s")
    return recording


def largest_section(browser: Any, folder: Path, graph: Any) -> None:
    """Open more and more Llama blocks (x 80 opened, the rest boxed) until layout takes
    over 2.5 s: the largest drawings laid out within 1 s and 2 s."""
    from report_data import drawing_data

    from torchgraphrec.render.engine import run_engine

    counts = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    steps = [{"name": f"{k} blocks open", "budget": 2500, "split": True, "repeat": 3,
              "keep": True,
              "state": {"depth": 1, "unfold": "all",
                        "openSubtree": [f"layer:layers.{i}#0" for i in range(k)]}}
             for k in counts]
    first = {"name": "warm-up", "state": {"depth": 1}}
    result = run_page(browser, spike_page({"first": first, "steps": steps},
                                          drawing_data(graph)), folder)
    print("\nLargest drawing: Llama-70B-shaped, x 80 opened, k blocks open at full depth")
    print(HEADER + f"{'DOT parse':>11}{'parse+layout':>14}{'graphviz-pure':>15}")
    within = {1000: None, 2000: None}
    for name, r in result["steps"].items():
        started = time.perf_counter()
        run_engine(r["dot"], "svg")
        native = (time.perf_counter() - started) * 1000
        print(row(name, r) + f"{r['dotParse']:>11.0f}{r['layoutJson']:>14.0f}{native:>15.0f}")
        for budget in within:
            if r["total"] <= budget:
                within[budget] = (name, r["nodes"], r["edges"])
    for budget, found in within.items():
        print(f"  within {budget / 1000:.0f} s: {found[0]} ({found[1]} nodes, {found[2]} edges)"
              if found else f"  within {budget / 1000:.0f} s: none")


def sizes_section(graph: Any) -> None:
    """What a report of this graph would carry, in MB."""
    from report_data import drawing_data

    from torchgraphrec.render.engine import run_engine
    from torchgraphrec.render.html import _data, _inline_svg
    from torchgraphrec.render.vendor import viz_js
    from torchgraphrec import to_dot

    drawing = len(_script(drawing_data(graph)).encode())
    details = len(_script(_data(graph)).encode())
    svg = len(_inline_svg(run_engine(to_dot(graph), "svg")).encode())
    viz = len(viz_js().text.encode())
    total = drawing + details + svg + viz + 60_000
    print(f"\nReport size for Llama-70B-shaped ({len(graph)} nodes): viz-js {viz / 1e6:.2f} MB, "
          f"drawing description {drawing / 1e6:.2f} MB, details data (today's) "
          f"{details / 1e6:.2f} MB, first drawing SVG {svg / 1e6:.2f} MB, page code ~0.06 MB: "
          f"about {total / 1e6:.1f} MB (target under 8 MB)")


FONT_LABELS = ["abcdefghij", "1x16x768", "1×16×768", "a -> b", "a → b", "WWWWWWWW", "iiiiiiii",
               "layers.40.self_attn: Attention"]


def fonts_section(browser: Any, folder: Path) -> None:
    """Graphviz's own text widths (no fonts in wasm or in graphviz-pure: built-in metrics)
    against what Chromium draws, per label, for Helvetica and Times."""
    from torchgraphrec.render.engine import run_engine

    lines = [f'n{k}{f} [label="{text}" fontname="{font}"]'
             for k, text in enumerate(FONT_LABELS)
             for f, font in (("h", "Helvetica"), ("t", "Times-Roman"))]
    dot = ("digraph { node [shape=plaintext margin=0 width=0 height=0 fontsize=14]\n"
           + "\n".join(lines) + "\n}")
    estimated = {o["name"]: float(o["width"]) * 72 for o in
                 json.loads(run_engine(dot, "json0"))["objects"]}
    script = ("() => Object.fromEntries([...document.querySelectorAll('#host g.node')].map("
              "g => [g.querySelector('title').textContent, "
              "g.querySelector('text').getComputedTextLength()]))")
    config = {"first": {"name": "fonts", "dot": dot, "svg": True}, "steps": []}
    path = folder / "fonts.html"
    path.write_text(spike_page(config), encoding="utf-8")
    from render.browser import open_page

    with open_page(browser, path) as loaded:
        loaded.page.wait_for_function("window.__result !== undefined")
        drawn = loaded.page.evaluate(script)
        svg = loaded.page.evaluate("window.__result.first.svg")
    print(f"\nText widths, Graphviz's estimate (same in viz-js: {same_svg(svg, dot)} SVG) vs "
          "Chromium's drawing, 14 pt")
    print(f"{'label':34s}{'Helvetica est':>14}{'drawn':>8}{'Times est':>11}{'drawn':>8}")
    for k, text in enumerate(FONT_LABELS):
        h, t = f"n{k}h", f"n{k}t"
        print(f"{text:34s}{estimated[h]:>14.1f}{drawn[h]:>8.1f}{estimated[t]:>11.1f}"
              f"{drawn[t]:>8.1f}")


def main(argv: list[str] | None = None) -> int:
    from render.browser import launch, missing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="GPT-2 only")
    args = parser.parse_args(argv)
    if missing():
        print(f"skipped: {missing()}")
        return 0
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    with launch() as browser, tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        fonts_section(browser, folder)
        gpt2_section(browser, folder)
        if not args.quick:
            llama_section(browser, folder, grad=False)
            recording = llama_section(browser, folder, grad=True)
            largest_section(browser, folder, recording.graph)
            sizes_section(recording.graph)
    return 0


if __name__ == "__main__":
    sys.exit(main())
