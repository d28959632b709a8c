"""DOT structure, checked through the engine's layout: clusters, boxes, edges, folding."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from models import deep_mlp, resnet50_like
from render.layout import (cluster_depth, cluster_parents, clusters, drawn_edges, drawn_nodes,
                           layout, title_of)
from torchgraphrec.render.engine import run_engine


@pytest.fixture(scope="module")
def recordings() -> dict[str, tgr.Recording]:
    cases = {name: fresh(name) for name in ("resnet_like", "reused_module", "gpt2", "mlp",
                                            "functional", "inplace")}
    cases["mlp_deep_200"] = deep_mlp(200, 8)
    return {name: tgr.record(*case) for name, case in cases.items()}


def _layer_of(cluster_id: str) -> str:
    return cluster_id.removeprefix("c-")


@pytest.mark.parametrize("expand_leaves", [False, True])
@pytest.mark.parametrize("name", ["resnet_like", "gpt2", "functional", "inplace"])
def test_clusters_nest_exactly_as_the_module_tree(recordings: dict, name: str,
                                                  expand_leaves: bool) -> None:
    graph = recordings[name].graph
    drawing = layout(recordings[name].to_dot(fold_repeats=False, depth=None,
                                             expand_leaves=expand_leaves))
    parents = cluster_parents(drawing)
    drawn = {_layer_of(c): _layer_of(p) if p else None for c, p in parents.items()}
    layers = nodes_of(graph, "layer")
    opened = ("layer", "op") if expand_leaves else ("layer",)
    clustered = {n for n, a in layers.items()
                 if any(graph.nodes[c]["kind"] in opened
                        for c in graph.nodes if graph.nodes[c]["parent"] == n)}
    assert set(drawn) == clustered
    for layer, parent in drawn.items():
        assert parent == layers[layer]["parent"]
    for layer, cluster in ((_layer_of(i), o) for i, o in clusters(drawing).items()):
        attrs = layers[layer]
        assert attrs["type"] in title_of(cluster)
        assert cluster["tooltip"].startswith(attrs["qualname"] or attrs["type"])


def test_the_root_call_is_the_outermost_cluster(recordings: dict) -> None:
    parents = cluster_parents(layout(recordings["gpt2"].to_dot()))
    assert [c for c, p in parents.items() if p is None] == ["c-layer:#0"]


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_depth_limits_clusters_and_draws_boxes(recordings: dict, depth: int) -> None:
    """Calls at ``depth`` are boxes; no cluster is deeper."""
    recording = recordings["resnet_like"]
    drawing = layout(recording.to_dot(depth=depth))
    parents = cluster_parents(drawing)
    assert all(cluster_depth(parents, c) <= depth for c in parents)
    boxes = [n for n in drawn_nodes(drawing).values() if n["class"] == "tgr-box"]
    layers = nodes_of(recording.graph, "layer")
    expected = {n for n, a in layers.items() if a["depth"] == depth}
    drawn = {b["id"].removeprefix("n-") for b in boxes}
    assert drawn <= set(layers) and drawn & expected
    assert all(layers[n]["depth"] <= depth for n in drawn)


def test_a_box_shows_type_shapes_and_parameter_count(recordings: dict) -> None:
    drawing = layout(recordings["resnet_like"].to_dot(depth=1))
    stem = drawn_nodes(drawing)["n-layer:stem#0"]
    assert stem["label"].split("\\n") == ["stem: Sequential", "2×3×16×16 → 2×16×8×8",
                                          "464 params"]


def test_edges_are_lifted_one_per_dependency_without_labels(recordings: dict) -> None:
    dot = recordings["reused_module"].to_dot(depth=0, fold_repeats=False)
    drawing = layout(dot)
    pairs = [(e["tail"], e["head"]) for e in drawing["edges"]]
    assert all(tail != head for tail, head in pairs)
    assert len(pairs) == len(set(pairs))
    merged = layout(recordings["resnet_like"].to_dot(depth=1, include_tensors=False))
    # the stem's output feeds the first conv and the residual add inside layers.0: one
    # dependency, one edge, and no "×2" that would read as a folded repeat
    pairs = drawn_edges(merged)
    assert pairs.count(("n-layer:stem#0", "n-layer:layers.0#0")) == 1
    assert {e.get("label", "") for e in merged["edges"]} <= {"", "reshape"}


def test_reused_module_calls_share_their_parameter_nodes(recordings: dict) -> None:
    dot = recordings["reused_module"].to_dot(fold_repeats=False, expand_leaves=True,
                                             include_params=True)
    drawing = layout(dot)
    nodes = {o["_gvid"]: o for o in drawing["objects"]}
    weight = next(g for g, o in nodes.items() if o.get("id") == "n-param:shared.weight")
    objects = drawing["objects"]
    owners = {o["id"] for o in objects if o["name"].startswith("cluster_")
              for e in drawing["edges"] if e["tail"] == weight and e["head"] in o.get("nodes", [])
              and o["id"].startswith("c-layer:shared#")}
    assert owners == {"c-layer:shared#0", "c-layer:shared#1", "c-layer:shared#2"}


def _cluster_labels(dot: str) -> list[str]:
    return [title_of(cluster) for cluster in clusters(layout(dot)).values()]


def test_gpt2_blocks_fold_into_one() -> None:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=12, n_embd=32, n_head=2, vocab_size=50,
                                 bos_token_id=0, eos_token_id=0)).eval()
    recording = tgr.record(model, torch.randint(0, 50, (1, 8)))
    labels = _cluster_labels(recording.to_dot(depth=None))
    assert "h.0–11: GPT2Block  × 12" in labels
    assert not any(label.startswith("h.1:") for label in labels)
    unfolded = _cluster_labels(recording.to_dot(fold_repeats=False, depth=None))
    assert {f"h.{i}: GPT2Block" for i in range(12)} <= set(unfolded)


def test_resnet50_bottlenecks_fold_stage_by_stage() -> None:
    recording = tgr.record(*resnet50_like(32))
    labels = _cluster_labels(recording.to_dot(depth=None))
    folded = sorted(label for label in labels if "×" in label)
    # the first block of each stage downsamples; the rest of the stage folds
    assert folded == ["1–2: Bottleneck  × 2", "1–2: Bottleneck  × 2", "1–3: Bottleneck  × 3",
                      "1–5: Bottleneck  × 5"]


def test_linear_relu_pairs_fold_as_one_block(recordings: dict) -> None:
    dot = recordings["mlp_deep_200"].to_dot()
    drawing = layout(dot)
    groups = [o for o in clusters(drawing).values() if o.get("class") == "tgr-repeat"]
    assert [g["label"] for g in groups] == ["× 200"]
    assert len(drawing["objects"]) < 30


def test_folding_stops_at_parent_ops_between_calls() -> None:
    graph = tgr.record(*fresh("looped_linear")).graph
    labels = _cluster_labels(tgr.to_dot(graph))
    assert not any("×" in label for label in labels)


@pytest.mark.parametrize("kind", ["tensors", "params", "ops"])
def test_kinds_can_be_left_out_and_put_in(recordings: dict, kind: str) -> None:
    def classes(included: bool) -> list[str]:
        dot = recordings["resnet_like"].to_dot(expand_leaves=True, **{f"include_{kind}": included})
        return [n["class"] for n in drawn_nodes(layout(dot)).values()]

    model_tensors = 2  # the model's input and output are always drawn
    count = classes(False).count(f"tgr-{kind[:-1]}")
    assert count == (model_tensors if kind == "tensors" else 0)
    assert classes(True).count(f"tgr-{kind[:-1]}") > count


def test_without_ops_leaf_calls_are_boxes_on_a_connected_path(recordings: dict) -> None:
    import networkx as nx

    dot = recordings["mlp"].to_dot(include_ops=False, include_params=False)
    drawing = layout(dot)
    flow = nx.DiGraph((e["tail"], e["head"]) for e in drawing["edges"])
    ids = {o["_gvid"]: o["id"] for o in drawing["objects"]}
    names = {ids[n] for n in flow.nodes}
    assert {"n-layer:0#0", "n-layer:1#0", "n-layer:2#0"} <= names
    start = next(g for g, i in ids.items() if i == "n-tensor:0@v0")
    end = next(g for g, i in ids.items() if i == "n-tensor:3@v0")
    assert nx.has_path(flow, start, end)


def test_dot_is_deterministic() -> None:
    first = tgr.record(*fresh("gpt2")).to_dot()
    second = tgr.record(*fresh("gpt2")).to_dot()
    assert first == second


def test_svg_is_valid_xml_with_stable_ids_and_classes(recordings: dict) -> None:
    recording = recordings["resnet_like"]
    svg = run_engine(recording.to_dot(expand_leaves=True, include_params=True), "svg")
    root = ElementTree.fromstring(svg)
    groups = {g.get("id"): g.get("class", "") for g in root.iter("{http://www.w3.org/2000/svg}g")}
    assert groups["c-layer:#0"].endswith("tgr-cluster tgr-ResNetLike")
    assert "tgr-op" in groups["n-op:conv2d#0"]
    assert "tgr-flow" in groups["e-tensor:0@v0--op:conv2d#0"]
    assert "tgr-param" in groups["n-param:stem.0.weight"]


def test_hostile_module_and_type_names_render() -> None:
    names = ["<lambda>", "a&b", '"x"', "{}", "|", "back\\slash", "trailing\\", "naïve ✓",
             "R&amp;D", "a&lt;b"]  # entities Graphviz would read as & and <
    model = nn.Sequential()
    for index, name in enumerate(names):
        cls = type(f"T{index}{name.strip(chr(92))}".replace(" ", ""), (nn.Linear,), {})
        model.add_module(name, cls(3, 3))
    recording = tgr.record(model, torch.randn(1, 3))
    dot = recording.to_dot()
    svg = run_engine(dot, "svg")
    root = ElementTree.fromstring(svg)
    texts = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for name in names:
        assert name.strip("\\") in texts.replace("\\\\", "\\")
    assert re.search(r'id="n-_layer:_3c_lambda_3e_#0"', dot)


def test_to_pydot_keeps_the_clusters(recordings: dict) -> None:
    from torchgraphrec.render import to_pydot

    dot = to_pydot(recordings["mlp"].graph, expand_leaves=True)
    root = dot.get_subgraphs()
    assert [s.get_name() for s in root] == ["cluster_0"]
    assert sorted(s.get_name() for s in root[0].get_subgraphs()) == ["cluster_1", "cluster_2",
                                                                     "cluster_3"]
    assert dot.get_name() == "Sequential"


def test_modules_whose_names_escape_alike_keep_apart_in_the_drawing() -> None:
    class Dict(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = nn.ModuleDict({'a"b': nn.Linear(4, 4), "a_22_b": nn.Linear(4, 8)})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.d["a_22_b"](self.d['a"b'](x))

    recording = tgr.record(Dict(), torch.randn(1, 4))
    svg = run_engine(recording.to_dot(depth=3), "svg")
    ids = [element.get("id") for element in ElementTree.fromstring(svg).iter()
           if element.get("id")]
    assert len(ids) == len(set(ids))
    assert {'n-_layer:d.a_22_b#0', "n-layer:d.a_22_b#0"} <= set(ids)


class ReturnsItsMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict:
        return {"logits": self.lin(x), "mask": mask}


@pytest.mark.parametrize("depth", [0, 1, None])
def test_an_input_returned_as_it_came_in_is_drawn_as_an_output_fed_by_it(depth) -> None:
    recording = tgr.record(ReturnsItsMask(), (torch.randn(2, 3), torch.ones(2, 3)))
    drawing = layout(recording.to_dot(depth=depth))
    labels = {id_: node["label"] for id_, node in drawn_nodes(drawing).items()}
    [mask] = [id_ for id_, label in labels.items() if label.startswith("mask")]
    [out] = [id_ for id_, label in labels.items() if label.startswith("output['mask']")]
    assert (mask, out) in drawn_edges(drawing)
