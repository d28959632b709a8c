"""Draw the gallery: eight real architectures, each at the defaults, at depth 1 and in the paper theme.

    python docs/gallery.py           # rewrites docs/gallery/*.svg (about a minute)

A test checks that the committed pictures are current; regenerate them after any change to
the drawing (or to the capture) with this one command.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GALLERY = HERE / "gallery"

#: The three drawings of each model: file suffix -> options.
DRAWINGS: dict[str, dict[str, Any]] = {
    "": {},
    "-depth1": {"depth": 1},
    "-paper": {"theme": "paper"},
}


def record(name: str) -> Any:
    """Record gallery model ``name`` (seeded: the same weights and inputs every time)."""
    import torch

    import torchgraphrec
    from gallery_models import MODELS

    torch.manual_seed(0)
    model, args, kwargs = MODELS[name][1]()
    with torch.no_grad():
        return torchgraphrec.record(model, args, kwargs)


def draw(name: str, folder: Path = GALLERY) -> list[Path]:
    """Write the three drawings of gallery model ``name`` into ``folder``."""
    recording = record(name)
    return [recording.render(folder / f"{name}{suffix}.svg", **options)
            for suffix, options in DRAWINGS.items()]


def main(folder: Path = GALLERY, names: Any = None) -> list[Path]:
    """Draw every gallery model (or those in ``names``) into ``folder``."""
    from gallery_models import MODELS

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or MODELS:
        written += draw(name, folder)
    return written


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    sys.path[:0] = [str(HERE.parent), str(HERE)]  # this checkout's torchgraphrec, then ours
    for path in main(names=sys.argv[1:] or None):
        print(path)
