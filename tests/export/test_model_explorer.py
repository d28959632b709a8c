"""rec.render("x.me.json"): Model Explorer's graph, its layers nested as the module calls."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from torchgraphrec.export import to_model_explorer
from torchgraphrec.export.plan import Plan

MODELS = ["mlp", "resnet_like", "gpt2", "reused_module", "structured_outputs", "inplace"]


@pytest.fixture(scope="module", params=[*MODELS, "mlp-autograd"])
def written(request, tmp_path_factory) -> tuple[nx.DiGraph, dict]:
    if request.param == "gpt2":
        pytest.importorskip("transformers")
    name, _, ops = request.param.partition("-")  # autograd: nodes read without shapes
    graph = tgr.record(*fresh(name), ops=ops or "torch").graph
    path = tgr.Recording(graph).render(tmp_path_factory.mktemp("me") / "model.me.json")
    return graph, json.loads(Path(path).read_text(encoding="utf-8"))


def me_nodes(document: dict) -> dict[str, dict]:
    [graph] = document["graphs"]
    return {node["id"]: node for node in graph["nodes"]}


def test_the_package_loads_it_into_its_own_dataclasses(written) -> None:
    graph_builder = pytest.importorskip("model_explorer.graph_builder")
    dacite = pytest.importorskip("dacite")
    graph, document = written
    loaded = dacite.from_dict(graph_builder.GraphCollection, document,
                              config=dacite.Config(strict=True))
    assert loaded.label == graph.graph["model"]
    assert len(loaded.graphs) == 1 and len(loaded.graphs[0].nodes) == len(me_nodes(document))
    assert all(isinstance(item, graph_builder.KeyValue)
               for node in loaded.graphs[0].nodes for item in node.attrs)


def test_every_edge_comes_out_of_a_node_of_the_graph(written) -> None:
    _, document = written
    nodes = me_nodes(document)
    for node in nodes.values():
        inputs = [edge["targetNodeInputId"] for edge in node["incomingEdges"]]
        assert inputs == [str(i) for i in range(len(inputs))], node["id"]
        for edge in node["incomingEdges"]:
            source = nodes[edge["sourceNodeId"]]
            outputs = {item["id"] for item in source["outputsMetadata"]}
            assert edge["sourceNodeOutputId"] in outputs, (source["id"], node["id"])


def test_ops_sit_in_the_layer_of_their_call_so_expanding_it_shows_them(written) -> None:
    graph, document = written
    nodes, plan = me_nodes(document), Plan(graph)
    for op, attrs in nodes_of(graph, "op").items():
        chain, up = [], attrs["parent"]
        while up is not None:
            chain.append(plan.names.get(up, ""))
            up = graph.nodes[up]["parent"]
        roots = [n for n, a in nodes_of(graph, "layer").items() if a["parent"] is None]
        expected = "/".join(reversed(chain[:-1] if len(roots) == 1 else chain))
        assert nodes[op]["namespace"] == expected and nodes[op]["label"] == attrs["name"]
    for layer in plan.groups:
        attrs = graph.nodes[layer]
        if attrs["parent"] is not None:
            assert plan.names[layer].endswith(f": {attrs['type']}")


def test_boundary_tensors_are_the_outputs_of_the_op_that_made_them(written) -> None:
    graph, document = written
    nodes = me_nodes(document)
    for tensor, attrs in nodes_of(graph, "tensor").items():
        makers = [p for p in graph.predecessors(tensor) if graph.nodes[p]["kind"] == "op"]
        if not makers:
            assert tensor in nodes  # an input, a constant: a node of its own
            continue
        assert tensor not in nodes
        [item] = [i for i in nodes[makers[0]]["outputsMetadata"]
                  if {"key": "tensor_name", "value": tensor} in i["attrs"]]
        shape = ", ".join(str(dim) for dim in attrs["shape"])
        assert {"key": "tensor_shape", "value": f"{attrs['dtype']}[{shape}]"} in item["attrs"]
        for user in graph.successors(tensor):
            if user in nodes:
                assert {"sourceNodeId": makers[0], "sourceNodeOutputId": item["id"]} in [
                    {k: e[k] for k in ("sourceNodeId", "sourceNodeOutputId")}
                    for e in nodes[user]["incomingEdges"]]


def test_the_model_outputs_params_and_layers_are_shown(written) -> None:
    graph, document = written
    nodes = me_nodes(document)
    outputs = [n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "output"]
    assert {nodes[f"output:{n}"]["label"] for n in outputs} == {
        graph.nodes[n]["name"] for n in outputs}
    for param, attrs in nodes_of(graph, "param").items():
        assert nodes[param]["label"] == attrs["qualname"].rpartition(".")[2]
    groups = document["graphs"][0]["groupNodeAttributes"]
    assert groups[""]["model"] == graph.graph["model"]
    plan = Plan(graph)
    for layer in plan.groups:
        if plan.paths[layer]:
            assert groups[plan.paths[layer]]["qualname"] == graph.nodes[layer]["qualname"]


def test_a_call_holding_nothing_is_a_node_in_its_parents_layer() -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Identity())
    graph = tgr.record(model, torch.randn(2, 3)).graph
    nodes = me_nodes(json.loads(to_model_explorer(graph)))
    assert "layer:1#0" not in Plan(graph).groups  # it ran no op
    assert nodes["layer:1#0"]["label"] == "1: Identity" and nodes["layer:1#0"]["namespace"] == ""
    [edge] = nodes["layer:1#0"]["incomingEdges"]
    assert nodes[edge["sourceNodeId"]]["namespace"] == "0: Linear"


def test_modules_of_one_type_called_apart_get_their_own_layers() -> None:
    # a Recorder seeing model.tower_a and model.tower_b called directly: both were one
    # layer, "Sequential", their ops and side panels merged
    import torch

    class Towers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tower_a = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
            self.tower_b = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    model = Towers()
    with tgr.Recorder(model) as recorder:
        model.tower_a(torch.randn(2, 4))
        model.tower_b(torch.randn(2, 4))
        model.tower_a(torch.randn(2, 4))
    nodes = me_nodes(json.loads(to_model_explorer(recorder.graph)))
    spaces = {node["namespace"] for node_id, node in nodes.items() if node_id.startswith("op:")}
    assert spaces == {"tower_a: Sequential/0: Linear", "tower_a: Sequential/1: ReLU",
                      "tower_b: Sequential/0: Linear", "tower_b: Sequential/1: ReLU",
                      "tower_a#1: Sequential/0#1: Linear", "tower_a#1: Sequential/1#1: ReLU"}


def test_repeated_calls_and_clashing_names_get_their_own_layers() -> None:
    graph = tgr.record(*fresh("reused_module")).graph
    plan = Plan(graph)
    assert sorted(plan.paths[n] for n in plan.groups) == [
        "", "shared#1: Linear", "shared#2: Linear", "shared: Linear"]


@pytest.mark.parametrize("order", [("x", "x", "x#1"), ("x", "x#1", "x")])
def test_a_name_holding_a_hash_never_merges_with_another_call(order: tuple) -> None:
    # d["x#1"]'s call and d.x's second call were both the layer "d.x#1: Linear": their ops
    # in one layer, one side panel written over by the other
    import torch

    class Hashed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = torch.nn.ModuleDict({"x": torch.nn.Linear(4, 4),
                                          "x#1": torch.nn.Linear(4, 4)})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for key in order:
                x = self.d[key](x)
            return x

    graph = tgr.record(Hashed(), torch.randn(2, 4)).graph
    [document] = json.loads(to_model_explorer(graph))["graphs"]
    nodes = {node["id"]: node for node in document["nodes"]}
    layers = [n for n, a in nodes_of(graph, "layer").items() if a["depth"] == 1]
    spaces = {}
    for layer in layers:
        [op] = [n for n, a in nodes_of(graph, "op").items() if a["parent"] == layer]
        spaces[layer] = nodes[op]["namespace"]
        attrs = document["groupNodeAttributes"][spaces[layer]]
        assert (attrs["qualname"], attrs["call_index"]) == (
            graph.nodes[layer]["qualname"], str(graph.nodes[layer]["call_index"]))
    assert len(set(spaces.values())) == len(layers) == 3, spaces


def test_no_node_is_pinned_to_the_top_of_its_layer(written) -> None:
    # Model Explorer keeps one pinned node per layer (the last), lays out neither it nor
    # the layer's edges that touch it, and lays out none outside a layer: of a weight and
    # a bias both pinned, the bias went on top, the weight to the layer's corner, and
    # neither kept its edge into the op
    _, document = written
    assert [node["id"] for node in me_nodes(document).values() if node["config"]] == []


def me_split(namespace: str) -> list[str]:
    r"""The layer labels Model Explorer shows for a node's namespace: of a namespace holding
    ";" only the last ";"-separated part, split at "/" but not at "\/", each part with
    "\/" shown as "/" (graph_processor.ts processNodes, utils.ts splitNamespace and
    unEscapeString)."""
    parts = [part for part in namespace.split(";") if part]
    namespace = parts[-1] if len(parts) > 1 else namespace
    escaped = namespace.replace("\\/", "\0").split("/")
    return [part.replace("\0", "/") for part in escaped if part]


def test_module_names_holding_model_explorers_separators_show_as_themselves() -> None:
    import torch

    class Dict(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = torch.nn.ModuleDict({"a/b": torch.nn.Linear(2, 2),
                                          "a_b": torch.nn.Linear(2, 2),
                                          "a%2Fb": torch.nn.Linear(2, 2),
                                          "x;y": torch.nn.Sequential(torch.nn.ReLU())})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.d["x;y"](self.d["a%2Fb"](self.d["a_b"](self.d["a/b"](x))))

    graph = tgr.record(Dict(), torch.randn(1, 2)).graph
    [document] = json.loads(to_model_explorer(graph))["graphs"]
    nodes = {node["id"]: node for node in document["nodes"]}
    ops = sorted(nodes_of(graph, "op"), key=lambda n: graph.nodes[n]["seq"])
    shown = [me_split(nodes[op]["namespace"]) for op in ops]
    assert shown == [["d.a/b: Linear"], ["d.a_b: Linear"], ["d.a%2Fb: Linear"],
                     ["d.x\uff1by: Sequential", "0: ReLU"]]
    # each layer's side panel is found under the namespace its nodes are in
    for layer in ("layer:d.a/b#0", "layer:d.x;y.0#0"):
        [op] = [n for n, a in nodes_of(graph, "op").items() if a["parent"] == layer]
        assert document["groupNodeAttributes"][nodes[op]["namespace"]]["qualname"] == \
            graph.nodes[layer]["qualname"]


def test_each_attribute_key_is_written_once_times_rounded_from_their_stamps() -> None:
    import collections
    import re

    graph = tgr.record(*fresh("mlp"), backward=True).graph
    document = json.loads(to_model_explorer(graph))
    for node in me_nodes(document).values():
        counts = collections.Counter(item["key"] for item in node["attrs"])
        assert [key for key, count in counts.items() if count > 1] == [], node["id"]
    ops = [me_nodes(document)[n] for n in nodes_of(graph, "op")]
    keys = {item["key"] for node in ops for item in node["attrs"]}
    assert {"forward_ms", "backward_ms"} <= keys
    # a group's panel is a mapping: a key written twice left the unrounded copy there
    for path, pairs in document["graphs"][0]["groupNodeAttributes"].items():
        for key in ("forward_ms", "backward_ms"):
            if key in pairs:
                assert re.fullmatch(r"\d+\.\d{3}", pairs[key]), (path, key, pairs[key])


def test_instant_ops_show_a_time_of_zero() -> None:
    # autograd's ops are instants (their stamps equal): their forward_ms is 0, and shown
    graph = tgr.record(*fresh("mlp"), ops="autograd").graph
    document = json.loads(to_model_explorer(graph))
    instants = [n for n, a in nodes_of(graph, "op").items() if a["t_end_ns"] == a["t_start_ns"]]
    assert instants
    for node in instants:
        times = [item["value"] for item in me_nodes(document)[node]["attrs"]
                 if item["key"] == "forward_ms"]
        assert times == ["0.000"], node


def test_an_output_returned_as_it_came_in_is_wired_to_what_it_was() -> None:
    import torch

    class KeepsMask(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple:
            return self.lin(x), mask

    graph = tgr.record(KeepsMask(), (torch.randn(2, 3), torch.ones(2, 3))).graph
    [passed] = [n for n, a in nodes_of(graph, "tensor").items() if a.get("name") == "output[1]"]
    [mask] = [n for n, a in nodes_of(graph, "tensor").items() if a.get("name") == "mask"]
    nodes = me_nodes(json.loads(to_model_explorer(graph)))
    assert passed not in nodes  # no node of its own: the edge out of the input's
    [edge] = nodes[f"output:{passed}"]["incomingEdges"]
    assert edge["sourceNodeId"] == mask and nodes[mask]["label"] == "mask"
    assert [n["label"] for n in nodes.values() if n["id"].startswith("output:")] == [
        "output[0]", "output[1]"]
