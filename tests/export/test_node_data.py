"""rec.render("x.me-data.json", data=...): Model Explorer's overlay of a numeric attribute."""

from __future__ import annotations

import json
import math

import pytest
import torch

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from torchgraphrec.export import to_model_explorer, to_node_data


@pytest.fixture(scope="module")
def recording() -> tgr.Recording:
    return tgr.record(*fresh("resnet_like"))


def results(graph, data: str) -> dict[str, float]:
    [(graph_id, overlay)] = json.loads(to_node_data(graph, data=data)).items()
    assert graph_id == graph.graph["model"]
    return {node: item["value"] for node, item in overlay["results"].items()}


def test_the_package_loads_it_into_its_own_dataclasses(recording, tmp_path) -> None:
    builder = pytest.importorskip("model_explorer.node_data_builder")
    dacite = pytest.importorskip("dacite")
    path = recording.render(tmp_path / "params.me-data.json", data="num_params")
    [(graph_id, overlay)] = json.loads(path.read_text()).items()
    loaded = dacite.from_dict(builder.GraphNodeData, overlay, config=dacite.Config(strict=True))
    assert loaded.name == "num_params" and loaded.results
    assert [item.stop for item in loaded.gradient] == [0, 0.5, 1]
    model = builder.ModelNodeData(graphsData={graph_id: loaded})
    assert json.loads(model.to_json_string()) == json.loads(path.read_text())


def test_values_land_on_nodes_of_the_graph_and_are_never_counted_twice(recording) -> None:
    graph = recording.graph
    values = results(graph, "num_params")
    [document] = json.loads(to_model_explorer(graph))["graphs"]
    assert set(values) <= {node["id"] for node in document["nodes"]}
    root = [a for a in nodes_of(graph, "layer").values() if a["parent"] is None][0]
    assert sum(values.values()) == root["num_params"]  # Model Explorer's sum at the top


def test_values_of_ops_are_their_own_and_calls_lend_theirs_to_what_made_their_output(
        recording) -> None:
    graph = recording.graph.copy()
    head = min(n for n, a in nodes_of(graph, "op").items() if a["parent"] == "layer:fc#0")
    graph.nodes[head]["score"] = 2.5
    conv = "layer:stem.0#0"
    graph.nodes[conv]["score"] = 7.0
    graph.nodes["layer:#0"]["score"] = 100.0
    values = results(graph, "score")
    [made] = [p for p in graph.predecessors(graph.nodes[conv]["outputs"][0])
              if graph.nodes[p]["kind"] == "op"]
    assert values == {head: 2.5, made: 7.0}  # the root's 100 would count everything twice


@pytest.mark.parametrize("ops", ["torch", None])
def test_params_is_read_as_a_drawing_reads_it(ops, tmp_path) -> None:
    # color_by="params" paints an SVG by a call's num_params and a parameter's size: the
    # overlay takes the same name, and Model Explorer's totals are the model's parameters
    # (a buffer, BatchNorm's running_mean, holds none)
    graph = tgr.record(*fresh("resnet_like"), ops=ops).graph
    values = results(graph, "params")
    for param, attrs in nodes_of(graph, "param").items():
        assert values.get(param) == (None if attrs["buffer"] else math.prod(attrs["shape"]))
    root = [a for a in nodes_of(graph, "layer").values() if a["parent"] is None][0]
    assert sum(values.values()) == root["num_params"] > 0


def test_an_attribute_no_node_has_is_named_with_those_that_exist(recording, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"no node has a numeric 'flops' attribute \(must be "
                                         r"one of \[.*'num_params'"):
        recording.render(tmp_path / "x.me-data.json", data="flops")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("options, match", [
    ({}, r"missing option 'data' for .me-data.json, e.g. render\('costs.me-data.json', "
         r"data='flops'\)"),
    ({"data": "num_params", "depth": 1},
     r"unknown option 'depth' for .me-data.json \(must be one of \['data'\]\)"),
    ({"data": ""}, "data must be the name of a numeric node attribute, got ''"),
    ({"data": 3}, "data must be the name of a numeric node attribute, got 3"),
])
def test_options_are_checked(recording, tmp_path, options, match) -> None:
    with pytest.raises(TypeError, match=match):
        recording.render(tmp_path / "x.me-data.json", **options)


class Twice(torch.nn.Module):
    """fc called twice, g once: 40 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.g = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.g(self.fc(self.fc(x)))


class Shared(torch.nn.Module):
    """One Linear owned by an encoder and a decoder both: 60 parameters."""

    def __init__(self) -> None:
        super().__init__()
        shared = torch.nn.Linear(4, 4)
        self.enc = torch.nn.Sequential(torch.nn.Linear(4, 4), shared)
        self.dec = torch.nn.Sequential(torch.nn.Linear(4, 4), shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


class TwiceBesideARead(torch.nn.Module):
    """A module called twice in the model's own call, beside a weight read without its
    module's call: the second call counted its parameters again in the model around both,
    which left no room there for the weight read."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.proj = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(self.enc(self.enc(x)), self.proj.weight,
                                          self.proj.bias)


@pytest.mark.parametrize("model", [Twice, Shared, TwiceBesideARead])
@pytest.mark.parametrize("data", ["params", "num_params", "trainable_params", "param_bytes"])
def test_a_module_called_again_adds_no_parameters(model, data: str) -> None:
    # a value of the module, not of the call: Model Explorer's total at the top is the
    # model's own, each parameter counted once, at its module's first call
    made = model()
    graph = tgr.record(made, torch.randn(2, 4)).graph
    count = sum(p.numel() for p in made.parameters())
    expected = count * 4 if data == "param_bytes" else count
    assert sum(results(graph, data).values()) == expected


class Tied(torch.nn.Module):
    """T5's tie: the module named first for the weight is never called."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = torch.nn.Embedding(100, 32)
        self.enc = torch.nn.Embedding(100, 32)
        self.enc.weight = self.shared.weight
        self.head = torch.nn.Linear(32, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(ids))


class ReadsWeights(torch.nn.Module):
    """A block reads its child's weight without calling it, beside a call of no
    parameters (a GELU): the block's parameters sit on no call inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.act = torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(torch.nn.functional.linear(x, self.proj.weight, self.proj.bias))


class Nested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blk = ReadsWeights()
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blk(x))


@pytest.mark.parametrize("name", ["tied", "nested", "t5"])
@pytest.mark.parametrize("data", ["num_params", "trainable_params", "param_bytes"])
def test_parameters_of_modules_never_called_are_counted_where_they_are_read(
        name: str, data: str) -> None:
    # they were dropped: a call was passed over once any node inside it held a value,
    # a GELU's 0 included (T5's shared embedding: 3,200 of 32,384 parameters missing)
    if name == "t5":
        pytest.importorskip("transformers")
        model, args, kwargs = fresh("t5")
    else:
        model, args, kwargs = (Tied(), (torch.randint(0, 100, (2, 5)),), {}) if name == "tied" \
            else (Nested(), (torch.randn(2, 8),), {})
    graph = tgr.record(model, args, kwargs).graph
    count = sum(p.numel() for p in model.parameters())
    values = results(graph, data)
    assert sum(values.values()) == (count * 4 if data == "param_bytes" else count)
    if name == "nested":  # the block's weights sit in the block, on the op that reads them
        [linear] = [n for n, a in nodes_of(graph, "op").items() if a["name"] == "linear"
                    and a["parent"] == "layer:blk#0"]
        assert values[linear] == (72 * 4 if data == "param_bytes" else 72)
