"""Recordings without ops (``ops=None``): edges run between tensors and module calls."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import fresh
from render.layout import clusters, drawn_edges, drawn_nodes, flow, layout


def test_a_chain_of_calls_is_a_chain_of_boxes() -> None:
    recording = tgr.record(*fresh("mlp"), ops=None)
    assert recording.graph.graph["ops"] == "none"
    graph = flow(layout(recording.to_dot()))
    assert list(nx.topological_sort(graph)) == [
        "n-tensor:0@v0", "n-layer:0#0", "n-layer:1#0", "n-layer:2#0", "n-tensor:3@v0"]


def test_outer_calls_that_receive_a_tensor_add_no_edge_of_their_own() -> None:
    recording = tgr.record(*fresh("resnet_like"), ops=None)
    received = [t for s, t in recording.graph.edges if s == "tensor:0@v0"]
    assert received == ["layer:#0", "layer:stem#0", "layer:stem.0#0"]
    edges = drawn_edges(layout(recording.to_dot(depth=None)))
    assert [t for s, t in edges if s == "n-tensor:0@v0"] == ["n-layer:stem.0#0"]


def test_what_a_call_computed_itself_is_drawn_in_place() -> None:
    recording = tgr.record(*fresh("resnet_like"), ops=None)
    drawing = layout(recording.to_dot(depth=None, fold_repeats=False))
    nodes = drawn_nodes(drawing)
    residual = next(s for s, t in recording.graph.edges if t == "layer:layers.0.0.relu#1"
                    and s.startswith("tensor:"))  # the block's own "+ identity"
    assert f"n-{residual}" in nodes
    graph = flow(drawing)
    assert graph.has_edge(f"n-{residual}", "n-layer:layers.0.0.relu#1")
    below = _y(nodes["n-layer:layers.0.0.bn2#0"]) > _y(nodes[f"n-{residual}"])  # y grows upward
    assert below


def _y(node: dict) -> float:
    return float(node["pos"].split(",")[1])


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x * 2)


@pytest.mark.parametrize("rankdir", ["TB", "LR"])
def test_an_edge_into_a_call_drawn_as_a_cluster_ends_at_its_border(rankdir: str) -> None:
    recording = tgr.record(Scaled(), torch.randn(2, 3), ops=None)
    drawing = layout(recording.to_dot(rankdir=rankdir))
    name = clusters(drawing)["c-layer:#0"]["name"]
    ids = {o["_gvid"]: o["id"] for o in drawing["objects"]}
    (entry,) = [e for e in drawing["edges"] if ids[e["tail"]] == "n-tensor:0@v0"]
    assert entry["lhead"] == name


class ScaledAfter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * 2


def test_an_output_the_model_computed_itself_comes_out_of_its_border() -> None:
    recording = tgr.record(ScaledAfter(), torch.randn(2, 3), ops=None)
    drawing = layout(recording.to_dot())
    name = clusters(drawing)["c-layer:#0"]["name"]
    ids = {o["_gvid"]: o["id"] for o in drawing["objects"]}
    (exit_edge,) = [e for e in drawing["edges"] if ids[e["head"]] == "n-tensor:2@v0"
                    and e.get("style") != "invis"]
    assert recording.graph.nodes["tensor:2@v0"]["role"] == "output"
    assert exit_edge["ltail"] == name
