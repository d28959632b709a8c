"""The default drawing: one depth rule, layout ops as edge labels, attention's roles, shared inputs."""

from __future__ import annotations

import re

import networkx as nx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchgraphrec as tgr
from helpers import fresh
from render.layout import drawn_edges, drawn_nodes, layout
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.oproles import LAYOUT_OPS
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
    assert {"view", "transpose", "reshape"} < every  # a contiguous tensor's contiguous() is no op
    assert "reshape" not in _labels(attention, include_ops="all").values()


def test_attention_arguments_are_labelled_and_drawn_q_k_v(attention: tgr.Recording) -> None:
    sdpa = "scaled_dot_product_attention"
    assert {source: label for (source, target), label in _labels(attention).items()
            if target == sdpa} == {"query": "query", "key": "key", "value": "value"}
    drawing = layout(attention.to_dot())
    x = {node["id"]: float(node["pos"].split(",")[0]) for node in drawn_nodes(drawing).values()}
    assert x["n-layer:query#0"] < x["n-layer:key#0"] < x["n-layer:value#0"]


def _into_attention(drawing: dict) -> list[tuple[str, str, float, float]]:
    """Each drawn edge into attention, in the order the DOT gives them: its label, its
    tail's id, where its tail is drawn and where its arrow ends (x, points)."""
    objects = {o["_gvid"]: o for o in drawing["objects"]}
    found = []
    for edge in drawing.get("edges", []):
        head, tail = objects[edge["head"]], objects[edge["tail"]]
        if head.get("id", "").startswith("n-op:scaled_dot_product_attention"):
            end = float(edge["pos"].split()[0].split(",")[1])  # "e,x,y": the arrow's end
            found.append((edge.get("label", ""), tail["id"], float(tail["pos"].split(",")[0]),
                          end))
    return found


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_transformers_attention_reads_query_key_value(name: str) -> None:
    # GPT-2 splits one projection and Llama ropes q and k; both pass k and v through the
    # cache's cat: the key's way is the longest, yet the drawing reads q, k, v
    rec = tgr.record(*fresh(name))
    into = _into_attention(layout(rec.to_dot()))
    assert [label for label, *_ in into][:3] == ["query", "key", "value"]
    assert {label for label, *_ in into} <= {"query", "key", "value", "mask"}
    # what the DOT fixes: the arrows end at attention's corners in order (compass points);
    # the ops just before them Graphviz orders by crossings alone (on transformers 4.57,
    # Llama's key and query cross just above attention), so their order is not asserted
    ends = {label: x for label, *_, x in into}
    assert ends["query"] < ends["key"] < ends["value"]


def test_llamas_projections_are_drawn_q_k_v_and_feed_their_roles() -> None:
    rec = tgr.record(*fresh("llama"))
    drawing = layout(rec.to_dot())
    x = {node["id"]: float(node["pos"].split(",")[0]) for node in drawn_nodes(drawing).values()}
    attn = "n-layer:layers.0.self_attn."
    assert x[f"{attn}q_proj#0"] < x[f"{attn}k_proj#0"] < x[f"{attn}v_proj#0"]
    # each role's drawn tail is computed from its own projection only (the recorded flow)
    for label, tail, *_ in _into_attention(drawing):
        if label == "mask":
            continue
        made_by = {p for p in ("q_proj", "k_proj", "v_proj")
                   if any(nx.has_path(rec.graph, n, tail[2:]) for n, parent
                          in rec.graph.nodes(data="parent")
                          if parent == f"layer:layers.0.self_attn.{p}#0")}
        assert made_by == {label[0] + "_proj"}


@pytest.mark.parametrize("name, block, projections", [
    ("bert", "encoder.layer.0.attention.self.", ("query", "key", "value")),
    ("llama", "layers.0.self_attn.", ("q_proj", "k_proj", "v_proj")),
    ("multihead_attention", "", ()),
])
def test_the_projections_are_one_row_q_k_v(name: str, block: str, projections: tuple) -> None:
    # BERT's mask is made outside the attention module: the row holds what is inside it;
    # nn.MultiheadAttention projects with one weight and draws no row
    dot = tgr.record(*fresh(name)).to_dot()
    rows = re.findall(r"\{rank=same; (n\d+(?: -> n\d+)+) \[style=invis\]\}", dot)
    pos = {n["id"]: tuple(map(float, n["pos"].split(","))) for n in
           drawn_nodes(layout(dot)).values()}
    ids = [f"n-layer:{block}{p}#0" for p in projections]
    assert len(rows) == (1 if projections else 0)
    if projections:
        assert len({pos[i][1] for i in ids}) == 1
        assert [pos[i][0] for i in ids] == sorted(pos[i][0] for i in ids)


@pytest.mark.parametrize("rankdir", ["LR", "RL"])
def test_where_the_flow_runs_sideways_the_projections_read_q_k_v_from_the_top(
        rankdir: str) -> None:
    # the row's invisible edges put each box below the next there: it read v, k, q from
    # the top, against the arguments entering attention at its corners q, k, v
    dot = tgr.record(*fresh("llama")).to_dot(rankdir=rankdir)
    pos = {n["id"]: tuple(map(float, n["pos"].split(","))) for n in
           drawn_nodes(layout(dot)).values()}
    y = [pos[f"n-layer:layers.0.self_attn.{p}_proj#0"][1] for p in "qkv"]
    assert y[0] > y[1] > y[2]  # the engine's y grows upwards


def test_a_reshape_chain_between_two_modules_is_one_labelled_edge() -> None:
    # BERT's attention output goes transpose, contiguous/reshape into output.dense
    rec = tgr.record(*fresh("bert"))
    labels = _labels(rec)
    assert labels[("scaled_dot_product_attention", "encoder.layer.0.attention.output.dense")] \
        == "reshape"
    every = _labels(rec, include_ops="all")
    assert "reshape" not in every.values()


def test_berts_default_drops_only_the_layout_ops_and_draws_one_layer() -> None:
    rec = tgr.record(*fresh("bert"))
    default = build_view(rec.graph, RenderOptions())
    every = build_view(rec.graph, RenderOptions(include_ops="all"))
    layout_ops = [n for n in every.nodes if every.kind(n) == "op"
                  and every.folded.nodes[n]["name"] in LAYOUT_OPS]
    assert layout_ops and set(default.nodes) == set(every.nodes) - set(layout_ops)
    # the boxes are the leaf calls outside the encoder and those of its first layer only
    leaves = {n for n, a in rec.graph.nodes(data=True) if a["kind"] == "layer"
              and not any(rec.graph.nodes[c]["kind"] == "layer" for c in rec.graph
                          if rec.graph.nodes[c]["parent"] == n)}
    once = {n for n in leaves if ".layer." not in n or ".layer.0." in n}
    assert {n for n in default.nodes if default.kind(n) == "box"} == once
    # 18 such boxes, the 4 inputs and outputs, and transformers' own mask and position
    # ops between them (27 with transformers 4.5x): one screen-sized column, where every
    # op (include_ops="all") draws 14 more and the four layers unfolded draw twice as many
    assert len(default.nodes) <= 50


@pytest.mark.parametrize("rankdir, axis, sign", [("TB", 1, 1), ("BT", 1, 1), ("LR", 2, -1),
                                                  ("RL", 2, -1)])
def test_attentions_arguments_end_in_order_along_the_side_the_flow_enters(
        attention: tgr.Recording, rankdir: str, axis: int, sign: int) -> None:
    # left to right where the flow runs down or up, top to bottom where it runs sideways
    # (the engine's y grows upwards)
    drawing = layout(attention.to_dot(rankdir=rankdir))
    objects = {o["_gvid"]: o for o in drawing["objects"]}
    ends = {edge.get("label"):
            sign * float(edge["pos"].split()[0].split(",")[axis])
            for edge in drawing["edges"] if objects[edge["head"]].get("id", "").startswith(
                "n-op:scaled_dot_product_attention")}
    assert ends["query"] < ends["key"] < ends["value"]


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


class _Halves(nn.Module):
    """Llama's rotate_half on a projection: two slices, one negated, joined along the last
    dimension; then a sum along a dimension too long to write."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        turned = torch.cat((-y[..., 2:], y[..., :2]), dim=-1)
        return turned.sum(dim=(0, 1), keepdim=True)


def test_ops_that_take_a_part_or_work_along_a_dimension_say_which() -> None:
    recording = tgr.record(_Halves(), torch.randn(3, 4))
    labels = sorted(node["label"].split("\\n")[0]
                    for node in drawn_nodes(layout(recording.to_dot())).values()
                    if "tgr-op" in node.get("class", ""))
    # neg and sum keep their name alone: neg is not among the ops drawn with arguments,
    # and the sum's are too long; each slice says which half it takes
    assert labels == ["cat dim=-1", "getitem [..., 2:]", "getitem [..., :2]", "neg", "sum"]
    sums = [attrs for _, attrs in recording.graph.nodes(data=True) if attrs.get("name") == "sum"]
    assert [attrs["args"] for attrs in sums] == ["dim=(0, 1), keepdim=True"]
