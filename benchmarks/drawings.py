"""Drawing size: each gallery model at the defaults beside torchview's, laid out by the same engine.

    python benchmarks/drawings.py

Areas are the laid-out drawings' own sizes in points (the SVG's ``width`` and ``height``, as
graphviz-pure lays them out), not PNG pixels: a PNG is capped at 7,680 px and a capped
picture is scaled down, so its pixels say nothing of the drawing's size.

Two comparisons. ``same depth``: torchview draws the model at the depth torchgraphrec's
defaults chose (``depth="auto"``; every level counts as torchview's depth 99), nested
(``expand_nested=True``): the same modules opened, the target is our area at most 1.5x
torchview's. ``tv default``: torchview at its own defaults (``depth=3``, modules not
nested), for information: there it draws fewer true nodes (docs/rendering.rst says which).
Where torchview fails, the target is at most 20 screens of 1,080 px at 96 dpi.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "docs")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

MAX_RATIO = 1.5
MAX_SCREENS = 20
SCREEN_PX = 1080


def svg_size(dot: str) -> tuple[int, int]:
    """Width and height in points of ``dot`` laid out by graphviz-pure (its SVG's header)."""
    from torchgraphrec.render.engine import run_engine

    svg = run_engine(dot, "svg", "graphviz-pure").decode()
    found = re.search(r'<svg width="(\d+)pt" height="(\d+)pt"', svg)
    return int(found.group(1)), int(found.group(2))


def ours(name: str) -> tuple[Optional[int], tuple[int, int]]:
    """The depth our defaults chose (``None``: every level) and the drawing's size."""
    from gallery import record

    from torchgraphrec.render.dot import to_dot
    from torchgraphrec.render.options import RenderOptions
    from torchgraphrec.render.view import build_view

    recording = record(name)
    depth = build_view(recording.graph, RenderOptions()).depth
    return depth, svg_size(to_dot(recording.graph))


def torchview_size(name: str, **options: Any) -> Any:
    """torchview's drawing size under ``options``, or the reason it failed."""
    import torch
    from torchview import draw_graph

    from gallery_models import MODELS

    torch.manual_seed(0)
    model, args, kwargs = MODELS[name][1]()
    data = kwargs if kwargs else list(args)
    try:
        return svg_size(draw_graph(model, input_data=data, **options).visual_graph.source)
    except Exception as exc:  # a peer's failure is a result here, whatever it is
        return f"{type(exc).__name__}: {str(exc)[:60]}"


def _ratio(size: tuple[int, int], theirs: Any) -> str:
    if not isinstance(theirs, tuple):
        return "fails"
    return f"{size[0] * size[1] / (theirs[0] * theirs[1]):.2f}"


def main() -> int:
    from gallery_models import MODELS

    failed = 0
    print(f"{'model':10} {'depth':>5} {'ours (pt)':>11} {'torchview (pt)':>15} {'same depth':>10}"
          f" {'tv default (pt)':>16} {'tv default':>10}")
    for name in MODELS:
        depth, size = ours(name)
        theirs = torchview_size(name, depth=99 if depth is None else depth, expand_nested=True)
        default = torchview_size(name)
        if isinstance(theirs, tuple):
            verdict = size[0] * size[1] <= MAX_RATIO * theirs[0] * theirs[1]
        else:
            verdict = size[1] * 96 / 72 / SCREEN_PX <= MAX_SCREENS
        failed += not verdict
        shown = [f"{t[0]}×{t[1]}" if isinstance(t, tuple) else "fails" for t in (theirs, default)]
        print(f"{name:10} {str(depth):>5} {f'{size[0]}×{size[1]}':>11} {shown[0]:>15} "
              f"{_ratio(size, theirs):>10} {shown[1]:>16} {_ratio(size, default):>10}"
              f"{'' if verdict else '  over target'}"
              + "".join(f"  (torchview: {t})" for t in {theirs, default} if isinstance(t, str)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
