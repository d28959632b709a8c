"""Readable defaults: big models render, at default options, to a drawing one can scroll.

The rule: an SVG at default options is at most 20 screens of 1080 px tall (16,200 pt at
Graphviz's 72 pt per inch and a screen's 96 px per inch).
"""

from __future__ import annotations

import re

import pytest
import torch

import torchgraphrec as tgr
from models import deep_mlp, resnet50_like
from torchgraphrec.render.engine import run_engine

SCREEN_PX = 1080
MAX_SCREENS = 20


def _gpt2_small() -> tuple:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(bos_token_id=0, eos_token_id=0)).eval()
    return model, torch.randint(0, 50257, (1, 16))


@pytest.mark.parametrize("make", [_gpt2_small, lambda: resnet50_like(32), lambda: deep_mlp(1000, 8)],
                         ids=["gpt2_small", "resnet50_like", "mlp_1000"])
def test_default_svg_is_at_most_20_screens_tall(make) -> None:
    model, inputs = make()[:2]
    recording = tgr.record(model, inputs)
    svg = run_engine(recording.to_dot(), "svg").decode()
    height_pt = float(re.search(r'<svg width="[\d.]+pt" height="([\d.]+)pt"', svg).group(1))
    screens = height_pt / 72 * 96 / SCREEN_PX
    assert 0.3 < screens <= MAX_SCREENS
