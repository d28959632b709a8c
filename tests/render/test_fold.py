"""Folding true to the model: only chains of identical calls fold, and nothing used is hidden."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from render.layout import clusters, drawn_nodes, flow, layout, title_of


def _boxes(recording: tgr.Recording, **options) -> dict[str, str]:
    """The drawn module calls, as boxes or clusters: layer id to label (or title)."""
    drawing = layout(recording.to_dot(**options))
    boxes = {i.removeprefix("n-"): n["label"] for i, n in drawn_nodes(drawing).items()
             if n["class"] == "tgr-box"}
    titles = {i.removeprefix("c-"): title_of(c) for i, c in clusters(drawing).items()}
    return {n: text for n, text in {**boxes, **titles}.items() if n != "layer:#0"}


class Branches(nn.Module):
    """Inception-style: three identical convolutions on the same input, concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.b1, self.b2, self.b3 = (nn.Conv2d(4, 4, 3, padding=1) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b2(x), self.b3(x)], 1)


class QKV(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


class Experts(nn.Module):
    """Mixture of experts: identical experts, each on the same input, results stacked."""

    def __init__(self) -> None:
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(6, 6) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([expert(x) for expert in self.experts]).sum(0)


@pytest.mark.parametrize("model, args, names", [
    (Branches(), (torch.randn(1, 4, 5, 5),), ["b1", "b2", "b3"]),
    (QKV(), (torch.randn(2, 3, 8),), ["q", "k", "v"]),
    (Experts(), (torch.randn(2, 6),), [f"experts.{i}" for i in range(4)]),
], ids=["concatenated branches", "q k v projections", "experts"])
def test_parallel_identical_siblings_never_fold(model: nn.Module, args: tuple,
                                                names: list[str]) -> None:
    boxes = _boxes(tgr.record(model, args))
    assert {f"layer:{name}#0" for name in names} <= set(boxes)
    assert not any("× " in label for label in boxes.values())


def test_a_chain_of_identical_calls_folds() -> None:
    model = nn.Sequential(*(nn.Linear(8, 8) for _ in range(3)))
    boxes = _boxes(tgr.record(model, torch.randn(2, 8)))
    assert list(boxes) == ["layer:0#0"]
    assert boxes["layer:0#0"].split("\\n")[0] == "0–2: Linear"
    assert boxes["layer:0#0"].endswith("× 3")


class Chain(nn.Module):
    """Three identical calls in a chain, with what they compute also used elsewhere."""

    def __init__(self, use: str) -> None:
        super().__init__()
        self.use = use
        self.l1, self.l2, self.l3 = (nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor):
        first = self.l1(x)
        second = self.l2(first)
        last = self.l3(second)
        if self.use == "output":
            return last, second  # a model output from the middle of the chain
        return last + first  # a skip from the first call past the others


@pytest.mark.parametrize("use", ["output", "skip"])
def test_a_fold_never_hides_a_tensor_used_outside_the_run(use: str) -> None:
    boxes = _boxes(tgr.record(Chain(use), torch.randn(2, 8)))
    assert {"layer:l1#0", "layer:l2#0", "layer:l3#0"} <= set(boxes)
    assert not any("× " in label for label in boxes.values())


def test_calls_with_other_settings_are_not_repeats() -> None:
    model = nn.Sequential(nn.LeakyReLU(0.1), nn.LeakyReLU(0.2))
    boxes = _boxes(tgr.record(model, torch.randn(2, 4)))
    assert set(boxes) == {"layer:0#0", "layer:1#0"}


@pytest.fixture(scope="module")
def bert() -> tgr.Recording:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    return tgr.record(BertModel(config).eval(), torch.randint(0, 100, (1, 8)))


@pytest.mark.parametrize("depth", ["auto", None, 1, 2, 3])
def test_bert_keeps_its_outputs_when_its_layers_fold(bert: tgr.Recording, depth) -> None:
    drawing = layout(bert.to_dot(depth=depth))
    nodes = drawn_nodes(drawing)
    expected = {f"n-{t}": a["name"] for t, a in bert.graph.nodes(data=True)
                if a.get("role") == "output"}
    assert len(expected) == 2  # last_hidden_state and pooler_output
    for node, name in expected.items():
        assert nodes[node]["label"].split("\\n")[0] == name
        assert flow(drawing).in_degree(node) == 1
    texts = [title_of(c) for c in clusters(drawing).values()] + [n["label"] for n in nodes.values()]
    assert any("× 3" in text for text in texts) == (depth != 1)


class DropBlock(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.fc, self.drop = nn.Linear(8, 8), nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc(x))


def _encoder_layer(norm_first: bool) -> nn.Module:
    return nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                      norm_first=norm_first)


@pytest.mark.parametrize("model, args", [
    (nn.Sequential(DropBlock(0.1), DropBlock(0.1), DropBlock(0.5), DropBlock(0.5)).train(),
     (torch.randn(2, 8),)),
    # the same settings text (none), the same shapes and parameters: only the order of the
    # ops inside tells the two kinds apart
    (nn.Sequential(*map(_encoder_layer, (False, False, True, True))).eval(),
     (torch.randn(2, 5, 16),)),
], ids=["dropout p inside", "norm first inside"])
@pytest.mark.parametrize("depth", [None, 1])
def test_blocks_that_differ_inside_fold_apart_also_drawn_as_boxes(model: nn.Module, args: tuple,
                                                                  depth) -> None:
    boxes = _boxes(tgr.record(model, args), depth=depth)
    runs = {node: label.replace("\\n", " ") for node, label in boxes.items() if "× " in label}
    assert set(runs) == {"layer:0#0", "layer:2#0"}
    assert all(label.startswith(f"{n}–{n + 1}: ") and label.rstrip().endswith("× 2")
               for n, label in zip((0, 2), runs.values()))


class EveryOther(nn.Module):
    """Six layers held, every other one called: a run of three that skips names."""

    def __init__(self) -> None:
        super().__init__()
        self.b = nn.ModuleList(nn.Linear(8, 8) for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index in (0, 2, 4):
            x = self.b[index](x)
        return x


def test_a_run_of_calls_that_skips_names_names_each() -> None:
    # "b.0–4" would read as five layers
    boxes = _boxes(tgr.record(EveryOther(), torch.randn(2, 8)))
    assert [label.split("\\n")[0] for label in boxes.values()] == ["b.0, 2, 4: Linear"]
