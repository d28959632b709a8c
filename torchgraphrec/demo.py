"""The built-in demo: a small residual CNN, recorded and written out as a drawing, a report and a recording."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

__all__ = ["Block", "DemoNet", "demo_model", "run_demo"]


class Block(nn.Module):
    """A residual block: conv, norm, ReLU, conv, norm, plus the input."""

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
    """A stem, two residual blocks and a classifier head, for 32x32 RGB images."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(inplace=True))
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def demo_model() -> tuple[DemoNet, torch.Tensor]:
    """The demo model in eval mode, with fixed weights, and one input batch for it.

    >>> model, batch = demo_model()
    >>> model(batch).shape
    torch.Size([1, 10])
    """
    torch.manual_seed(0)
    return DemoNet().eval(), torch.randn(1, 3, 32, 32)


def run_demo(directory: str | Path) -> list[str]:
    """Record the demo model with backward and write it into ``directory`` as SVG, HTML, PNG,
    DOT, JSON, GraphML and PDF (and a depth-1 SVG).

    Returns one line per file: its path, or why it was skipped (PDF without an engine).
    """
    from torchgraphrec.recorder import record
    from torchgraphrec.render.engine import EngineError

    model, batch = demo_model()
    recording = record(model, batch, backward=True, memory=True)
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
