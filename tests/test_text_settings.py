"""Settings lines from real modules' ``extra_repr()``."""

from __future__ import annotations

import pytest
from torch import nn

from torchgraphrec.text import settings_text


@pytest.mark.parametrize("module, text", [
    (nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False), "64→128, 3×3, stride 2, pad 1, no bias"),
    (nn.Conv1d(8, 8, 5, groups=8), "8→8, 5, groups 8"),
    (nn.ConvTranspose2d(32, 16, 2, stride=2), "32→16, 2×2, stride 2"),
    (nn.Linear(768, 3072), "768→3072"),
    (nn.BatchNorm2d(64), "64, eps=1e-05"),
    (nn.LayerNorm(768, eps=1e-12), "768, eps=1e-12"),
    (nn.Dropout(0.1), "p=0.1"),
    (nn.ReLU(inplace=True), ""),
    (nn.GELU(approximate="tanh"), "approximate=tanh"),
    (nn.Embedding(30522, 768, padding_idx=0), "30522→768, padding_idx=0"),
    (nn.MaxPool2d(3, stride=2, padding=1), "3×3, stride 2, pad 1"),
    (nn.AdaptiveAvgPool2d((1, 1)), "out 1×1"),
    # a pool's stride defaults to its kernel's size: 1 is no default there
    (nn.AvgPool1d(3, stride=1), "3, stride 1"),
    (nn.MaxPool2d(3, stride=1, padding=1), "3×3, stride 1, pad 1"),
    (nn.LPPool1d(2, 3, stride=1), "norm_type=2, 3, stride 1"),
    (nn.GroupNorm(4, 16), "16, groups 4, eps=1e-05"),  # 16 channels in 4 groups, not 4→16
    (nn.Upsample(scale_factor=2.0, mode="bilinear"), "scale 2.0, mode=bilinear"),
], ids=lambda value: type(value).__name__ if isinstance(value, nn.Module) else None)
def test_settings_are_short(module: nn.Module, text: str) -> None:
    assert settings_text(type(module).__name__, module.extra_repr()) == text


def test_long_settings_are_cut() -> None:
    text = settings_text("Custom", ", ".join(f"option_{i}={i}" for i in range(20)))
    assert text == "option_0=0, option_1=1, option_2=2, …"
