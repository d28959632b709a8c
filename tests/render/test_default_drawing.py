"""The default drawing: one depth rule, layout ops as edge labels, attention's roles, shared inputs."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchgraphrec as tgr
from helpers import fresh
from render.layout import drawn_edges, drawn_nodes, layout
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.view import build_view


class Attention(nn.Module):
    """Self-attention whose projections run value first: the drawing still reads q, k, v."""

    def __init__(self, width: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.value, self.query, self.key = (nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self._split(self.value(x))
        q, k = self._split(self.query(x)), self._split(self.key(x))
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out(out.transpose(1, 2).contiguous().reshape(x.shape))


@pytest.fixture(scope="module")
def attention() -> tgr.Recording:
    torch.manual_seed(0)
    return tgr.record(Attention(), torch.randn(1, 4, 8))


def _labels(rec: tgr.Recording, **options) -> dict[tuple[str, str], str]:
    view = build_view(rec.graph, RenderOptions(**options))
    return {(view.folded.nodes[s].get("qualname") or view.folded.nodes[s].get("name"),
             view.folded.nodes[t].get("qualname") or view.folded.nodes[t].get("name")): label
            for (s, t), label in view.labels.items()}


def test_layout_op_chains_are_one_reshape_edge(attention: tgr.Recording) -> None:
    drawing = layout(attention.to_dot())
    ops = {n["label"].split("\\n")[0] for n in drawn_nodes(drawing).values()
           if n["class"] == "tgr-op"}
    assert ops == {"scaled_dot_product_attention"}
    assert _labels(attention)[("scaled_dot_product_attention", "out")] == "reshape"
    every = {n["label"].split("\\n")[0] for n in drawn_nodes(layout(attention.to_dot(
        include_ops="all"))).values() if n["class"] == "tgr-op"}
    assert {"view", "transpose", "contiguous", "reshape"} < every
    assert "reshape" not in _labels(attention, include_ops="all").values()


def test_attention_arguments_are_labelled_and_drawn_q_k_v(attention: tgr.Recording) -> None:
    sdpa = "scaled_dot_product_attention"
    assert {source: label for (source, target), label in _labels(attention).items()
            if target == sdpa} == {"query": "query", "key": "key", "value": "value"}
    drawing = layout(attention.to_dot())
    x = {node["id"]: float(node["pos"].split(",")[0]) for node in drawn_nodes(drawing).values()}
    assert x["n-layer:query#0"] < x["n-layer:key#0"] < x["n-layer:value#0"]


@pytest.mark.parametrize("value", ["some", 1, None])
def test_include_ops_is_true_false_or_all(value) -> None:
    with pytest.raises(ValueError, match=r"include_ops must be True, False or 'all', got "):
        RenderOptions(include_ops=value)


def test_the_default_opens_blocks_to_their_leaf_modules() -> None:
    rec = tgr.record(*fresh("resnet_like"))
    view = build_view(rec.graph, RenderOptions())
    assert view.depth is None  # every level
    boxes = {rec.graph.nodes[n]["type"] for n in view.nodes if view.kind(n) == "box"}
    assert "Conv2d" in boxes and not boxes & {v.folded.nodes[c]["type"] for v in [view]
                                                for c in v.clusters}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * scale


class Shared(nn.Module):
    """Twelve blocks that all take the same ``scale`` tensor, made once (a rotary table)."""

    def __init__(self, blocks: int = 12) -> None:
        super().__init__()
        self.table = nn.Linear(1, 4)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.table(torch.ones(1, 1))
        for block in self.blocks:
            x = block(x, scale)
        return x


def test_a_shared_input_is_a_marker_beside_each_block_not_a_fan_out() -> None:
    rec = tgr.record(Shared(), torch.randn(2, 4))
    drawing = layout(rec.to_dot(fold_repeats=False, depth=1))
    out_degree = nx.DiGraph(drawn_edges(drawing)).out_degree()
    assert max(degree for _, degree in out_degree) <= 8
    markers = [n for n in drawn_nodes(drawing).values() if n["class"] == "tgr-marker"]
    assert len(markers) == 11 and {m["label"] for m in markers} == {"table"}
    folded = layout(rec.to_dot())
    assert not [n for n in drawn_nodes(folded).values() if n["class"] == "tgr-marker"]
