"""Module boxes: leaves are boxes at any depth, pass-through calls stay on the path, settings,
short titles with the full path in the tooltip, one edge per dependency, named inputs."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

import networkx as nx
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from render.layout import clusters, drawn_edges, drawn_nodes, flow, layout, title_of
from torchgraphrec.render.engine import run_engine

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def resnet() -> tgr.Recording:
    return tgr.record(*fresh("resnet_like"))


def _leaves(graph: nx.DiGraph) -> set[str]:
    layers = nodes_of(graph, "layer")
    parents = {a["parent"] for a in layers.values()}
    return {n for n in layers if n not in parents}


@pytest.mark.parametrize("depth", [None, 2, 3])
def test_leaf_modules_are_boxes_at_any_depth(resnet: tgr.Recording, depth) -> None:
    drawing = layout(resnet.to_dot(depth=depth, fold_repeats=False, include_ops="all"))
    nodes = drawn_nodes(drawing)
    leaves = {n for n in _leaves(resnet.graph) if resnet.graph.nodes[n]["depth"] <= (depth or 9)}
    drawn = {i.removeprefix("n-") for i, n in nodes.items() if n["class"] == "tgr-box"}
    assert leaves - drawn == set()  # fc at depth 1 too, not t, addmm, weight and bias
    ops = [i.removeprefix("n-") for i, n in nodes.items() if n["class"] == "tgr-op"]
    assert ops and all(resnet.graph.nodes[op]["parent"] not in leaves for op in ops)


class Normed(nn.Module):
    """A block with a norm inside, and the same norm type after the blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)))
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(x))


def test_the_same_type_at_every_level_is_drawn_the_same_way() -> None:
    recording = tgr.record(Normed(), torch.randn(2, 4))
    nodes = drawn_nodes(layout(recording.to_dot(depth=2)))
    norms = {i: n["class"] for i, n in nodes.items() if "LayerNorm" in n["label"]}
    assert norms == {"n-layer:norm#0": "tgr-box"}  # blocks.0.1 is at depth 3, cut
    nodes = drawn_nodes(layout(recording.to_dot(depth=3)))
    norms = {i: n["class"] for i, n in nodes.items() if "LayerNorm" in n["label"]}
    assert norms == {"n-layer:norm#0": "tgr-box", "n-layer:blocks.0.1#0": "tgr-box"}


def _ops(dot: str) -> set[str]:
    return {n["label"].split("\\n")[0] for n in drawn_nodes(layout(dot)).values()
            if n["class"] == "tgr-op"}


def test_ops_between_modules_are_drawn(resnet: tgr.Recording) -> None:
    assert _ops(resnet.to_dot()) == {"add"}  # the residual add in the block
    # the flatten in forward only lays the elements out anew: an edge labelled reshape
    assert ' label=reshape' in resnet.to_dot()
    assert _ops(resnet.to_dot(include_ops="all")) == {"add", "flatten"}


def test_expand_leaves_opens_the_boxes_into_their_ops(resnet: tgr.Recording) -> None:
    drawing = layout(resnet.to_dot(expand_leaves=True))
    assert "c-layer:fc#0" in clusters(drawing)
    assert "n-layer:fc#0" not in drawn_nodes(drawing)


def test_without_ops_expand_leaves_keeps_the_leaves_boxes(resnet: tgr.Recording) -> None:
    # opened to ops that are not drawn, the leaves were empty frames (Graphviz draws none)
    # and the flow ran from the input to the output past them
    drawing = layout(resnet.to_dot(expand_leaves=True, include_ops=False))
    assert "n-layer:fc#0" in drawn_nodes(drawing)
    assert "c-layer:fc#0" not in clusters(drawing)
    graph = flow(drawing)
    assert nx.has_path(graph, "n-layer:fc#0", next(n for n in graph if n.startswith("n-tensor")
                                                     and graph.out_degree(n) == 0))


@pytest.mark.parametrize("depth", [None, 0, 1])
def test_pass_through_calls_stay_on_the_path(depth) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Identity(), nn.Dropout().eval(), nn.Linear(4, 2))
    recording = tgr.record(model, torch.randn(3, 4))
    drawing = layout(recording.to_dot(depth=depth))
    graph = flow(drawing)
    if depth == 0:
        order = list(nx.topological_sort(graph))
        assert len(order) == 3 and order[:2] == ["n-tensor:0@v0", "n-layer:#0"]
        return
    path = ["n-tensor:0@v0", "n-layer:0#0", "n-layer:1#0", "n-layer:2#0", "n-layer:3#0"]
    assert list(nx.topological_sort(graph))[:5] == path
    assert all(graph.has_edge(a, b) for a, b in zip(path, path[1:]))


def test_a_pass_through_call_passes_what_comes_after_it() -> None:
    class Tap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            before = x * 2  # used before the call: stays with x
            return self.inner(x) + before

    x = torch.randn(2, 3, requires_grad=True)  # so that autograd records the ops too
    graph = flow(layout(tgr.record(Tap(), x).to_dot()))
    mul, add = (n for n in graph if n.startswith("n-op:"))
    assert graph.has_edge("n-tensor:0@v0", mul) and graph.has_edge("n-tensor:0@v0", "n-layer:inner#0")
    assert graph.has_edge("n-layer:inner#0", add) and not graph.has_edge("n-tensor:0@v0", add)


@pytest.mark.parametrize("also_used", [False, True])
def test_a_model_output_a_pass_through_call_returned_comes_from_that_call(
        also_used: bool) -> None:
    # T5's stacks end in final_layer_norm, then an eval-mode Dropout, whose return value
    # is the model's output: it was drawn from the norm, the Dropout a dead end
    class Ending(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.drop, self.head = nn.LayerNorm(8), nn.Dropout(0.1), nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> object:
            h = self.drop(self.norm(x))
            return (h, self.head(h)) if also_used else h

    recording = tgr.record(Ending().eval(), torch.randn(2, 8))
    [out] = [n for n, a in nodes_of(recording.graph, "tensor").items()
             if a["role"] == "output" and a["shape"] == (2, 8)]
    for options in ({}, {"include_tensors": True, "expand_leaves": True}):
        graph = flow(layout(recording.to_dot(**options)))
        # the norm's box, or its op where leaves are open
        norm = ["n-op:layer_norm#0"] if options else ["n-layer:norm#0"]
        assert list(graph.predecessors(f"n-{out}")) == ["n-layer:drop#0"]
        assert list(graph.predecessors("n-layer:drop#0")) == norm
        head = {"n-op:linear#1"} if options else {"n-layer:head#0"}
        assert set(graph.successors("n-layer:drop#0")) == {f"n-{out}"} | (head if also_used
                                                                          else set())


class _EncoderEnding(nn.Module):
    """T5's stack inside a model: its norm and eval Dropout one level down, the stack's
    output both returned and used by a head."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Dropout(0.1))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> dict:
        hidden = self.enc(x)
        return {"hidden": hidden, "logits": self.head(hidden)}


@pytest.mark.parametrize("depth, maker", [(1, "enc#0"), (2, "enc.2#0"), (None, "enc.2#0"),
                                          ("auto", "enc.2#0")])
def test_a_cut_below_the_pass_through_draws_no_edge_back_into_the_call_before(
        depth, maker: str) -> None:
    # the output, made inside the norm's call, went into the norm's box at depth 2: the
    # Dropout's edge to it became an edge back to the norm, a loop
    recording = tgr.record(_EncoderEnding().eval(), torch.randn(2, 8))
    [out] = [n for n, a in nodes_of(recording.graph, "tensor").items()
             if a.get("name") == "output['hidden']"]
    graph = flow(layout(recording.to_dot(depth=depth)))
    assert nx.is_directed_acyclic_graph(graph)
    assert list(graph.predecessors(f"n-{out}")) == [f"n-layer:{maker}"]


def test_boxes_show_settings_unless_asked_not_to(resnet: tgr.Recording) -> None:
    nodes = drawn_nodes(layout(resnet.to_dot(depth=None)))
    lines = nodes["n-layer:stem.0#0"]["label"].split("\\n")
    assert lines == ["0: Conv2d", "3→16, 3×3, pad 1, no bias", "2×3×16×16 → 2×16×16×16",
                     "432 params"]
    assert nodes["n-layer:stem.1#0"]["label"].split("\\n")[1] == "16, eps=1e-05"
    assert nodes["n-layer:fc#0"]["label"].split("\\n")[1] == "16→10"
    plain = drawn_nodes(layout(resnet.to_dot(depth=None, show_settings=False)))
    assert plain["n-layer:stem.0#0"]["label"].split("\\n")[1] == "2×3×16×16 → 2×16×16×16"


def test_titles_name_the_module_inside_its_parent_and_tooltips_the_path(resnet) -> None:
    dot = resnet.to_dot(depth=None, fold_repeats=False)
    found = clusters(layout(dot))
    assert title_of(found["c-layer:layers.0.1#0"]) == "1: Block"
    assert found["c-layer:layers.0.1#0"]["tooltip"] == "layers.0.1: Block"
    boxes = drawn_nodes(layout(dot))
    assert boxes["n-layer:layers.0.1.conv1#0"]["label"].startswith("conv1: Conv2d\\n")
    root = ElementTree.fromstring(run_engine(dot, "svg"))
    tips = {a.get("{http://www.w3.org/1999/xlink}title") for a in root.iter(f"{SVG}a")}
    assert {"layers.0.1: Block", "layers.0.1.conv1: Conv2d\n16, 16, kernel_size=(3, 3), "
            "stride=(1, 1), padding=(1, 1), bias=False"} <= tips


class Twice(nn.Module):
    """One tensor used twice inside one child: one dependency."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(3, 3)
        self.square = Square()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.square(self.pre(x))


class Square(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x + x


def test_one_edge_per_dependency_and_no_label_that_reads_as_a_repeat() -> None:
    drawing = layout(tgr.record(Twice(), torch.randn(2, 3)).to_dot(depth=1))
    assert drawn_edges(drawing).count(("n-layer:pre#0", "n-layer:square#0")) == 1
    assert [e for e in drawing["edges"] if "label" in e] == []


def test_model_inputs_and_outputs_are_named_with_their_shapes() -> None:
    recording = tgr.record(*fresh("two_inputs_kwargs"))
    nodes = drawn_nodes(layout(recording.to_dot()))
    labels = sorted(n["label"] for n in nodes.values() if n["class"] == "tgr-tensor")
    assert labels == ["a\\n2×4", "b\\n2×5", "bias\\n3", "output\\n2×3"]


def test_the_default_drawing_is_a_paper_figure(resnet: tgr.Recording) -> None:
    nodes = drawn_nodes(layout(resnet.to_dot()))
    kinds = [n["class"] for n in nodes.values()]
    assert "tgr-param" not in kinds  # parameters are counted in the boxes
    assert kinds.count("tgr-tensor") == 2  # the model's input and output
    assert nodes["n-layer:fc#0"]["label"].endswith("170 params")
    detailed = drawn_nodes(layout(resnet.to_dot(expand_leaves=True)))
    assert sum(n["class"] == "tgr-op" for n in detailed.values()) > 10  # one option away


class _Experts(nn.Module):
    """Weights of its own beside a submodule, as a fused MoE's experts hold them."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 16, 32))
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(torch.einsum("bd,edh->beh", x, self.w)).sum(1)


def test_an_open_module_counts_the_parameters_it_holds_itself() -> None:
    # drawn open, its own 2,048 parameters were in no box and no title
    model = nn.Sequential(nn.Linear(16, 16), _Experts())
    recording = tgr.record(model, torch.randn(2, 16))
    titles = [title_of(cluster) for cluster in clusters(layout(recording.to_dot())).values()]
    assert [title for title in titles if "of its own" in title] == [
        "1: _Experts\\l2k params of its own\\l"]
    opened = layout(recording.to_dot(expand_leaves=True))  # leaves opened: no such line
    assert sum("of its own" in title_of(c) for c in clusters(opened).values()) == 1


class _Positional(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x], 1).softmax(-1).sum(1)


def test_dimensions_given_by_position_are_drawn_named() -> None:
    # "cat 1" read as a count and "softmax -1" as a subtraction
    model = nn.Sequential(nn.Identity(), _Positional())
    dot = tgr.record(model, torch.randn(2, 3)).to_dot(expand_leaves=True)
    assert {"cat dim=1", "softmax dim=-1", "sum dim=1"} <= set(re.findall(r"[a-z]+ dim=-?\d", dot))


class _SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x).view(2, 1, 4, 16)
        return F.scaled_dot_product_attention(h, h, h)


def test_one_tensor_given_as_query_key_and_value_is_labelled_as_all_three() -> None:
    # its one edge said "query" only: a reader looked for the key and value
    recording = tgr.record(_SelfAttention(), torch.randn(2, 4, 16))
    [(_, _, attrs)] = recording.graph.in_edges("op:scaled_dot_product_attention#2", data=True)
    assert attrs["positions"] == (0, 1, 2)
    dot = recording.to_dot(expand_leaves=True)
    into = [line for line in dot.splitlines()
            if "--op:scaled_dot_product_attention#2" in line and "->" in line]
    assert len(into) == 1 and 'label="query/key/value"' in into[0]
