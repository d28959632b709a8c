"""The models compared in the diff tests: each pair differs in one known way."""

from __future__ import annotations

import torch
from torch import nn

import torchgraphrec as tgr

__all__ = ["Block", "Net", "recorded", "train_and_eval", "gpt2"]


class Block(nn.Module):
    def __init__(self, width: int, act: type = nn.ReLU) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = act()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(x))


class Net(nn.Module):
    """A stem, a run of residual blocks, an optional dropout and a head."""

    def __init__(self, width: int = 16, blocks: int = 1, act: type = nn.ReLU,
                 dropout: bool = True) -> None:
        super().__init__()
        self.stem = nn.Linear(8, width)
        self.blocks = nn.Sequential(*[Block(width, act) for _ in range(blocks)])
        self.drop = nn.Dropout(0.1) if dropout else None
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x if self.drop is None else self.drop(x))


def recorded(**options) -> tgr.Recording:
    torch.manual_seed(0)
    return tgr.record(Net(**options), torch.randn(3, 8))


def train_and_eval() -> tuple[tgr.Recording, tgr.Recording]:
    """A CNN with BatchNorm and Dropout recorded in train mode, then in eval mode."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5),
                          nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    batch = torch.randn(2, 3, 8, 8)
    return tgr.record(model.train(), batch), tgr.record(model.eval(), batch)


def gpt2(layers: int) -> tgr.Recording:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return tgr.record(GPT2Model(config).eval(), torch.randint(0, 100, (1, 8)))
