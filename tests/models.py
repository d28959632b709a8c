"""The shared model zoo: small models that cover what a recorder must handle."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from torchgraphrec.demo import Block as BasicBlock  # the demo's residual block, shared

__all__ = ["Case", "ZOO", "make", "mlp", "deep_mlp", "resnet_like", "resnet50_like", "gpt2",
           "ChainOps", "Raising"]


class Case(NamedTuple):
    """A model with inputs to call it with."""

    model: nn.Module
    args: tuple
    kwargs: dict


def mlp() -> Case:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return Case(model, (torch.randn(3, 8),), {})


def deep_mlp(layers: int = 200, width: int = 64) -> Case:
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return Case(nn.Sequential(*blocks), (torch.randn(8, width),), {})


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3, 1x1 expand (x4), projection shortcut when needed."""

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * 4
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNetLike(nn.Module):
    """A ResNet: a stem, stages of blocks (the first of each stage may downsample), a head."""

    def __init__(self, stages: list[int], bottleneck: bool = False, channels: int = 16,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(2))
        self.layers = nn.ModuleList()
        in_channels = channels
        for stage, count in enumerate(stages):
            if bottleneck:
                width = channels * 2 ** stage
                blocks = []
                for index in range(count):
                    blocks.append(Bottleneck(in_channels, width, 2 if index == 0 and stage else 1))
                    in_channels = width * 4
            else:
                blocks = [BasicBlock(channels) for _ in range(count)]
            self.layers.append(nn.Sequential(*blocks))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.layers:
            x = stage(x)
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet_like() -> Case:
    return Case(ResNetLike([2, 2]), (torch.randn(2, 3, 16, 16),), {})


def resnet50_like(size: int = 64) -> Case:
    """ResNet-50's shape: 3-4-6-3 bottlenecks, widths 64 to 2048, on a ``size`` x ``size`` image."""
    model = ResNetLike([3, 4, 6, 3], bottleneck=True, channels=64, num_classes=1000)
    return Case(model, (torch.randn(1, 3, size, size),), {})


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.a(x))
        out = self.b(x)
        out += h
        out[:, :2] = out[:, 4:] * 2
        return out


@dataclasses.dataclass
class Prediction:
    logits: torch.Tensor
    extra: Any


class StructuredOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> Any:
        h = self.enc(x)
        out = self.head(h)
        return ((out, None), {"hidden": h, "pair": (out * 2, "label")},
                Prediction(out + 1, [None, {"deep": h.sum()}]))


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Linear(4, 3)
        self.right = nn.Linear(5, 3)

    def forward(self, a: torch.Tensor, b: torch.Tensor, *, scale: float = 1.0,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        out = self.left(a) + self.right(b) * scale
        return out if bias is None else out + bias


class ReusedModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(5, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(torch.tanh(self.shared(self.shared(x))))


class LoopedLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = torch.relu(self.cell(x))
        return x


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 7, num_layers=2, batch_first=True)
        self.gru = nn.GRU(7, 3, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple:
        out, (h, c) = self.lstm(x)
        out2, h2 = self.gru(out)
        return out2, (h, c, h2)


def transformer_encoder() -> Case:
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return Case(model, (torch.randn(2, 5, 16),), {})


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(x, x, x, need_weights=False)
        return out


class Functional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(4, 6)
        self.c = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.a(x), self.b(x)], dim=0)
        h = F.relu(h.view(2, -1, 6)[:, 1:, :])
        return self.c(h)


class Embedder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


class DirectParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((4,), 0.5))
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


class PartlyNoGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(4, 4)
        self.trained = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = torch.relu(self.frozen(x))
        return self.trained(h)


def _ids(vocabulary: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, vocabulary, shape)


def bert() -> Case:
    """Hugging Face BERT from a small config, called as Hugging Face models mostly are:
    ``model(**batch)``, a padding mask and token types included."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    return Case(BertModel(config).eval(), (), {"input_ids": _ids(64, 2, 8), "attention_mask": mask})


def llama() -> Case:
    """Hugging Face Llama from a small config: rotary positions, grouped-query attention."""
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                         max_position_embeddings=32)
    return Case(LlamaModel(config).eval(), (), {"input_ids": _ids(64, 2, 8)})


def t5() -> Case:
    """Hugging Face T5 (encoder-decoder) from a small config, keyword arguments only."""
    from transformers import T5Config, T5Model

    config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_decoder_layers=2, num_heads=4, decoder_start_token_id=0)
    return Case(T5Model(config).eval(), (),
                {"input_ids": _ids(64, 2, 8), "decoder_input_ids": _ids(64, 2, 4)})


def gpt2() -> Case:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2Model(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    return Case(model, (ids,), {"attention_mask": torch.ones(1, 8, dtype=torch.long)})


class ChainOps(nn.Module):
    """One module whose forward chains ``length`` elementwise ops."""

    def __init__(self, length: int = 5000) -> None:
        super().__init__()
        self.length = length
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.weight
        for _ in range(self.length):
            x = x + 1.0
        return x


class Raising(nn.Module):
    """Raises ``ValueError`` from the forward of its child ``inner.bad``."""

    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("bad input shape in Bad.forward")

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.inner = nn.Sequential(nn.ReLU())
        self.inner.add_module("bad", Raising.Bad())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.first(x))


def _case(factory: Callable[[], nn.Module], *args: Any, **kwargs: Any) -> Callable[[], Case]:
    return lambda: Case(factory(), args, kwargs)


ZOO: dict[str, Callable[[], Case]] = {
    "mlp": mlp,
    "resnet_like": resnet_like,
    "inplace": lambda: Case(InPlace(), (torch.randn(3, 6),), {}),
    "structured_outputs": lambda: Case(StructuredOutputs(), (torch.randn(2, 4),), {}),
    "two_inputs_kwargs": lambda: Case(TwoInputs(), (torch.randn(2, 4), torch.randn(2, 5)),
                                      {"scale": 0.5, "bias": torch.randn(3)}),
    "reused_module": lambda: Case(ReusedModule(), (torch.randn(2, 5),), {}),
    "looped_linear": lambda: Case(LoopedLinear(), (torch.randn(2, 4),), {}),
    "recurrent": lambda: Case(Recurrent(), (torch.randn(2, 6, 5),), {}),
    "transformer_encoder": transformer_encoder,
    "multihead_attention": lambda: Case(Attention(), (torch.randn(2, 5, 8),), {}),
    "functional": lambda: Case(Functional(), (torch.randn(4, 4),), {}),
    "embedding": lambda: Case(Embedder(), (torch.randint(0, 20, (2, 5)),), {}),
    "direct_parameter": lambda: Case(DirectParameter(), (torch.randn(2, 4),), {}),
    "no_grad_block": lambda: Case(PartlyNoGrad(), (torch.randn(2, 4),), {}),
    "gpt2": gpt2,
    "bert": bert,
    "llama": llama,
    "t5": t5,
}


def make(name: str, seed: int = 0) -> Case:
    """Build zoo model ``name`` with deterministic weights and inputs."""
    torch.manual_seed(seed)
    return ZOO[name]()
