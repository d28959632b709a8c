"""The built-in demo: a small residual CNN, recorded and written out in every format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["demo_model", "run_demo"]


def demo_model() -> tuple[Any, Any]:
    """A small residual CNN with a classifier head, and one input batch for it."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + x)

    class DemoNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(inplace=True))
            self.blocks = nn.Sequential(Block(16), Block(16))
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.blocks(self.stem(x)))

    torch.manual_seed(0)
    return DemoNet().eval(), torch.randn(1, 3, 32, 32)


def run_demo(directory: str | Path) -> list[str]:
    """Record the demo model with backward and write every format into ``directory``.

    Returns one line per file: its path, or why it was skipped (PDF without an engine).
    """
    from torchgraphrec.recording import record
    from torchgraphrec.render.engine import EngineError

    model, batch = demo_model()
    recording = record(model, batch, backward=True)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for suffix in (".svg", ".html", ".png", ".dot", ".json", ".graphml", ".pdf"):
        try:
            lines.append(str(recording.render(folder / f"demo{suffix}")))
        except EngineError as exc:
            lines.append(f"skipped demo{suffix}: {exc}")
    lines.append(str(recording.render(folder / "demo-depth1.svg", depth=1)))
    return lines
