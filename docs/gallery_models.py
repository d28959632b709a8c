"""The gallery's eight architectures, built from small configurations with random weights.

Plain PyTorch for ResNet-50 and U-Net (torchvision cannot be installed beside this torch),
``transformers`` configurations for the rest; nothing is downloaded.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

__all__ = ["MODELS", "resnet50", "unet"]

Example = tuple[nn.Module, tuple, dict[str, Any]]


# --- ResNet-50 ----------------------------------------------------------------------------
class Bottleneck(nn.Module):
    """1×1 reduce, 3×3, 1×1 expand (×4), with a projection shortcut where shapes change."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet50(nn.Module):
    """torchvision's ResNet-50 layout: stem, four stages of 3, 4, 6 and 3 bottlenecks, head."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes, stages = 64, []
        for index, (planes, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            layers = []
            for block in range(blocks):
                layers.append(Bottleneck(inplanes, planes, 2 if block == 0 and index else 1))
                inplanes = planes * 4
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50() -> Example:
    return ResNet50().eval(), (torch.randn(1, 3, 64, 64),), {}


# --- U-Net --------------------------------------------------------------------------------
class DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Down(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.pool(x))


class Up(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    """Ronneberger et al.'s U-Net: four downsamplings, four upsamplings with skips."""

    def __init__(self, channels: int = 3, classes: int = 2, width: int = 16) -> None:
        super().__init__()
        widths = [width * 2 ** i for i in range(5)]
        self.inc = DoubleConv(channels, widths[0])
        self.down1, self.down2, self.down3, self.down4 = (
            Down(widths[i], widths[i + 1]) for i in range(4))
        self.up1, self.up2, self.up3, self.up4 = (Up(widths[i], widths[i - 1]) for i in (4, 3, 2, 1))
        self.outc = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x = self.up1(self.down4(x4), x4)
        return self.outc(self.up4(self.up3(self.up2(x, x3), x2), x1))


def unet() -> Example:
    return UNet().eval(), (torch.randn(1, 3, 64, 64),), {}


# --- transformers, from small configurations -------------------------------------------------
def _ids(vocab: int, length: int = 8) -> torch.Tensor:
    return torch.randint(0, vocab, (1, length))


def bert() -> Example:
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=64)
    return BertModel(config).eval(), (), {"input_ids": _ids(1000)}


def gpt2(n_layer: int = 4, n_inner: Optional[int] = None) -> Example:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(vocab_size=1000, n_embd=64, n_layer=n_layer, n_head=4, n_positions=64,
                        n_inner=n_inner, bos_token_id=0, eos_token_id=0)
    return GPT2Model(config).eval(), (), {"input_ids": _ids(1000)}


def llama() -> Example:
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=172, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaModel(config).eval(), (), {"input_ids": _ids(1000)}


def vit() -> Example:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=4,
                       num_attention_heads=4, intermediate_size=256)
    return ViTModel(config).eval(), (), {"pixel_values": torch.randn(1, 3, 32, 32)}


def mixtral() -> Example:
    from transformers import MixtralConfig, MixtralModel

    config = MixtralConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=64)
    return MixtralModel(config).eval(), (), {"input_ids": _ids(1000)}


def t5() -> Example:
    from transformers import T5Config, T5Model

    config = T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                      decoder_start_token_id=0)
    return T5Model(config).eval(), (), {"input_ids": _ids(1000), "decoder_input_ids": _ids(1000, 4)}


#: name -> (title, builder)
MODELS: dict[str, tuple[str, Callable[[], Example]]] = {
    "resnet50": ("ResNet-50", resnet50),
    "unet": ("U-Net", unet),
    "bert": ("BERT", bert),
    "gpt2": ("GPT-2", gpt2),
    "llama": ("Llama", llama),
    "vit": ("ViT", vit),
    "mixtral": ("Mixtral (mixture of experts)", mixtral),
    "t5": ("T5 (encoder-decoder)", t5),
}
