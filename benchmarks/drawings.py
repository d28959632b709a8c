"""Drawing size: each gallery model's PNG at the defaults beside torchview's, same engine and DPI.

    python benchmarks/drawings.py

torchview draws the same model at the depth torchgraphrec's defaults chose (``depth="auto"``;
every level counts as torchview's depth 99), nested (``expand_nested=True``); its DOT
(``graph.visual_graph.source``) is laid out by the same engine, graphviz-pure, at 96 dpi.
Target: our area at most 1.5× torchview's; where torchview fails, at most 20 screens of
1,080 px tall.
"""

from __future__ import annotations

import os
import struct
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


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG."""
    return struct.unpack(">II", data[16:24])


def ours(name: str) -> tuple[Optional[int], tuple[int, int]]:
    """The depth our defaults chose (``None``: every level) and the PNG's size."""
    from gallery import record

    from torchgraphrec.render.dot import to_dot
    from torchgraphrec.render.engine import run_engine
    from torchgraphrec.render.options import RenderOptions
    from torchgraphrec.render.view import build_view

    recording = record(name)
    depth = build_view(recording.graph, RenderOptions()).depth
    return depth, png_size(run_engine(to_dot(recording.graph), "png"))


def torchview_size(name: str, depth: Optional[int]) -> Any:
    """torchview's PNG size at ``depth``, or the reason it failed."""
    import torch
    from torchview import draw_graph

    from gallery_models import MODELS
    from torchgraphrec.render.engine import run_engine

    torch.manual_seed(0)
    model, args, kwargs = MODELS[name][1]()
    data = kwargs if kwargs else list(args)
    try:
        graph = draw_graph(model, input_data=data, depth=99 if depth is None else depth,
                           expand_nested=True)
        return png_size(run_engine(graph.visual_graph.source, "png", "graphviz-pure"))
    except Exception as exc:  # a peer's failure is a result here, whatever it is
        return f"{type(exc).__name__}: {str(exc)[:60]}"


def main() -> int:
    from gallery_models import MODELS

    failed = 0
    print(f"{'model':10} {'depth':>5} {'ours (px)':>12} {'torchview (px)':>16} {'area ratio':>10}")
    for name in MODELS:
        depth, (width, height) = ours(name)
        theirs = torchview_size(name, depth)
        if isinstance(theirs, tuple):
            ratio = width * height / (theirs[0] * theirs[1])
            verdict, shown = ratio <= MAX_RATIO, f"{theirs[0]}×{theirs[1]}"
            result = f"{ratio:10.2f}"
        else:
            screens = height / SCREEN_PX
            verdict, shown, result = screens <= MAX_SCREENS, "fails", f"{screens:.1f} screens"
        failed += not verdict
        print(f"{name:10} {str(depth):>5} {f'{width}×{height}':>12} {shown:>16} {result:>10}"
              f"{'' if verdict else '  over target'}" + ("" if isinstance(theirs, tuple)
                                                       else f"  (torchview: {theirs})"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
