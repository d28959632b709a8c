"""Draw the pictures the docs and the README show, from the built-in demo model.

    python docs/pictures.py          # rewrites docs/_static/*.svg

The docs build runs it too, so the pictures always match the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "_static"


def main(folder: Path = STATIC) -> list[Path]:
    """Record the demo model once and write its drawings into ``folder``."""
    import torchgraphrec
    from torchgraphrec.demo import demo_model

    folder.mkdir(parents=True, exist_ok=True)
    model, batch = demo_model()
    recording = torchgraphrec.record(model, batch, backward=True)
    written = [recording.render(folder / "readme.svg", depth=2, rankdir="LR")]
    for depth in (0, 1, 2):
        written.append(recording.render(folder / f"depth{depth}.svg", depth=depth))
    written.append(recording.render(folder / "full.svg"))
    written.append(recording.render(folder / "paper.svg", depth=2, theme="paper", rankdir="LR",
                                    include_params=False))
    return written


if __name__ == "__main__":
    sys.path.insert(0, str(STATIC.parent.parent))  # this checkout's torchgraphrec
    for path in main():
        print(path)
    sys.exit(0)
