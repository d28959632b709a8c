"""The big models the recorded times are held against: GPT-2 small, a ResNet-50, MLP-200."""

from __future__ import annotations

import torch

from models import Case, deep_mlp, resnet50_like

__all__ = ["BIG"]


def _gpt2_small() -> Case:
    """GPT-2 small (124M parameters) from its default config, with random weights."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(bos_token_id=0, eos_token_id=0)).eval()
    return Case(model, (torch.randint(0, 50257, (1, 16)),), {})


def _resnet50() -> Case:
    return resnet50_like(96)  # large enough that its convolutions, not Python, take the time


BIG = {"resnet50": _resnet50, "gpt2_small": _gpt2_small, "mlp200": lambda: deep_mlp(200, 64)}
