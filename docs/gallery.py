"""Draw the gallery: eight architectures three ways each, a diff, and a drawing coloured by FLOPs.

    python docs/gallery.py           # rewrites docs/gallery/*.svg (about a minute)
    python docs/gallery.py gpt2-diff.svg resnet50-flops.svg   # only these

A test checks that the committed pictures are current; regenerate them after any change to
the drawing (or to the capture) with this one command.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
GALLERY = HERE / "gallery"

#: The three drawings of each model: file suffix -> options.
DRAWINGS: dict[str, dict[str, Any]] = {
    "": {},
    "-depth1": {"depth": 1},
    "-paper": {"theme": "paper"},
}


def record(name: str, **options: Any) -> Any:
    """Record gallery model ``name`` (seeded: the same weights and inputs every time);
    ``options`` go to its builder."""
    import torch

    import torchgraphrec
    from gallery_models import MODELS

    torch.manual_seed(0)
    model, args, kwargs = MODELS[name][1](**options)
    with torch.no_grad():
        return torchgraphrec.record(model, args, kwargs)


def draw(name: str, folder: Path = GALLERY) -> list[Path]:
    """Write the three drawings of gallery model ``name`` into ``folder``."""
    recording = record(name)
    return [recording.render(folder / f"{name}{suffix}.svg", **options)
            for suffix, options in DRAWINGS.items()]


def gpt2_diff(folder: Path = GALLERY) -> Path:
    """What a change to GPT-2's configuration changed: a fifth block, a wider MLP."""
    import torchgraphrec

    old, new = record("gpt2"), record("gpt2", n_layer=5, n_inner=384)
    return torchgraphrec.diff(old, new).render(folder / "gpt2-diff.svg", depth=2)


def resnet50_costs(folder: Path = GALLERY) -> Path:
    """Where ResNet-50's FLOPs go, and the activations it saves for the backward."""
    import torch

    import torchgraphrec
    from gallery_models import resnet50

    torch.manual_seed(0)
    model, args, kwargs = resnet50()
    recording = torchgraphrec.record(model, args, kwargs, flops=True, memory=True)
    return recording.render(folder / "resnet50-flops.svg", color_by="flops", show_costs=True,
                            depth=2)


#: Pictures of what else a drawing shows: file name -> the function that writes it.
EXTRAS: dict[str, Callable[[Path], Path]] = {
    "gpt2-diff.svg": gpt2_diff,
    "resnet50-flops.svg": resnet50_costs,
}


def main(folder: Path = GALLERY, names: Any = None) -> list[Path]:
    """Draw every gallery model (or those in ``names``) into ``folder``."""
    from gallery_models import MODELS

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or [*MODELS, *EXTRAS]:
        written += [EXTRAS[name](folder)] if name in EXTRAS else draw(name, folder)
    return written


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    sys.path[:0] = [str(HERE.parent), str(HERE)]  # this checkout's torchgraphrec, then ours
    for path in main(names=sys.argv[1:] or None):
        print(path)
