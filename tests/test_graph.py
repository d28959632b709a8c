"""validate, collapse and the JSON round trip, on recorded zoo graphs and crafted ones."""

from __future__ import annotations

import networkx as nx
import pytest

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from torchgraphrec.graph import collapse, from_json, to_json, validate

GRAPH_MODELS = ["gpt2", "resnet_like", "reused_module", "structured_outputs", "inplace"]


@pytest.fixture(scope="module")
def graphs() -> dict[str, nx.DiGraph]:
    return {name: tgr.record(*fresh(name), backward=True).graph for name in GRAPH_MODELS}


def _copy(graph: nx.DiGraph) -> nx.DiGraph:
    return from_json(to_json(graph))


@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_json_round_trip_is_exact(graphs: dict, name: str) -> None:
    graph = graphs[name]
    again = from_json(to_json(graph))
    assert nx.utils.graphs_equal(graph, again)
    assert list(graph.nodes(data=True)) == list(again.nodes(data=True))
    assert sorted(graph.edges(data=True)) == sorted(again.edges(data=True))
    shapes = [a["shape"] for _, a in again.nodes(data=True) if "shape" in a]
    assert shapes and all(isinstance(shape, tuple) for shape in shapes)


def test_json_keeps_nested_tuples_and_extra_attributes() -> None:
    graph = _copy(tgr.record(*fresh("mlp")).graph)
    graph.nodes["layer:#0"]["extra"] = {"pairs": [(1, 2), (3, (4,))], "note": "é"}
    again = from_json(to_json(graph))
    assert again.nodes["layer:#0"]["extra"] == {"pairs": [(1, 2), (3, (4,))], "note": "é"}


@pytest.mark.parametrize("text, match", [
    ('{"format": "torchgraphrec.recording", "graph": {', "not valid JSON"),
    ("[1, 2]", "not a torchgraphrec recording"),
    ('{"format": "torchgraphrec.recording"}', "malformed document"),
])
def test_from_json_rejects_broken_documents(text: str, match: str) -> None:
    with pytest.raises(tgr.SchemaError, match=match):
        from_json(text)


def test_from_json_rejects_truncated_recording(graphs: dict) -> None:
    text = to_json(graphs["gpt2"])
    with pytest.raises(tgr.SchemaError, match="not valid JSON"):
        from_json(text[: len(text) // 2])


def test_from_json_rejects_newer_schema(graphs: dict) -> None:
    graph = _copy(graphs["gpt2"])
    graph.graph["schema_version"] = "3.0"
    with pytest.raises(tgr.SchemaError, match=r"schema_version '3.0' is not supported"):
        from_json(to_json(graph))


def test_from_json_names_both_versions_for_an_older_schema(graphs: dict) -> None:
    graph = _copy(graphs["gpt2"])
    graph.graph["schema_version"] = "1.0"
    with pytest.raises(tgr.SchemaError, match=r"'1.0' is older than this torchgraphrec's '2.1'"):
        from_json(to_json(graph))


def test_from_json_rejects_unknown_kind(graphs: dict) -> None:
    graph = _copy(graphs["gpt2"])
    graph.nodes["layer:#0"]["kind"] = "gadget"
    with pytest.raises(tgr.SchemaError, match=r"node 'layer:#0': unknown kind 'gadget'"):
        from_json(to_json(graph))


def _mutated(graph: nx.DiGraph, change) -> nx.DiGraph:
    copy = _copy(graph)
    change(copy)
    return copy


def _first_op(graph: nx.DiGraph) -> str:
    return min((n for n, a in graph.nodes(data=True) if a["kind"] == "op"),
               key=lambda n: graph.nodes[n]["seq"])


@pytest.mark.parametrize("change, match", [
    (lambda g: g.nodes["layer:#0"].pop("qualname"), r"node 'layer:#0': missing attribute 'qualname'"),
    (lambda g: g.nodes["layer:h.0#0"].update(depth=5),
     r"node 'layer:h.0#0': depth 5 is not its parent's depth \+ 1"),
    (lambda g: g.nodes["layer:h.0#0"].update(parent=_first_op(g)),
     r"parent 'op:[a-z_]+#0' is not a layer node"),
    (lambda g: g.nodes["layer:#0"].update(depth=1), r"depth must be 0 without a parent"),
    (lambda g: g.nodes["layer:#0"].update(call_index=-1), r"attribute 'call_index' has a bad value -1"),
    (lambda g: next(a for _, a in g.nodes(data=True) if a["kind"] == "tensor").update(shape=[1, 2]),
     r"attribute 'shape' has a bad value \[1, 2\]"),
    (lambda g: next(a for _, a in g.nodes(data=True) if a["kind"] == "tensor").update(role="side"),
     r"attribute 'role' has a bad value 'side'"),
    (lambda g: g.graph.pop("torch_version"), r"graph: missing attribute 'torch_version'"),
    (lambda g: g.add_edge(_first_op(g), _first_op(g), kind="flow", seq=1, t_ns=0),
     "self-loops are not allowed"),
    (lambda g: g.add_edge("param:wte.weight", _first_op(g), kind="flow", seq=1, t_ns=0),
     "kind must be 'param' exactly when the source is a param node"),
    (lambda g: next(iter(g.edges.values())).pop("t_ns"), "missing attribute 't_ns'"),
])
def test_validate_names_the_broken_rule(graphs: dict, change, match: str) -> None:
    broken = _mutated(graphs["gpt2"], change)
    with pytest.raises(tgr.SchemaError, match=match):
        validate(broken)


def test_validate_finds_cycles(graphs: dict) -> None:
    graph = _copy(graphs["inplace"])
    source, target = next((s, t) for s, t in graph.edges if graph.nodes[s]["kind"] == "op")
    graph.add_edge(target, source, kind="flow", seq=999, t_ns=0)
    with pytest.raises(tgr.SchemaError, match="data flow must be acyclic"):
        validate(graph)


def test_validate_refuses_other_graph_types() -> None:
    with pytest.raises(tgr.SchemaError, match="must be a networkx.DiGraph, got MultiDiGraph"):
        validate(nx.MultiDiGraph())


@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_collapse_keeps_the_schema_at_every_depth(graphs: dict, name: str) -> None:
    graph = graphs[name]
    deepest = max(d for _, d in graph.nodes(data="depth"))
    for depth in range(deepest + 1):
        folded = collapse(graph, depth)
        validate(folded)
        assert max(d for _, d in folded.nodes(data="depth")) <= depth
        assert nx.number_of_selfloops(folded) == 0
    assert nx.utils.graphs_equal(collapse(graph, deepest), _strip_counts(graph, deepest))


def _strip_counts(graph: nx.DiGraph, depth: int) -> nx.DiGraph:
    expected = graph.copy()
    for _, _, attrs in expected.edges(data=True):
        attrs["count"] = 1
    return expected


def test_collapse_folds_into_ancestors_and_lifts_edges(graphs: dict) -> None:
    graph = graphs["resnet_like"]
    folded = collapse(graph, 2)
    layers = nodes_of(folded, "layer")
    assert "layer:layers.0.0#0" in layers and "layer:layers.0.0.conv1#0" not in layers
    block = layers["layer:layers.0.0#0"]
    inner = [n for n, a in graph.nodes(data=True) if a["parent"] == "layer:layers.0.0#0"]
    assert block["collapsed"] >= len(inner) > 0
    conv_weight = "param:layers.0.0.conv1.weight"
    assert conv_weight not in folded
    for source, target in folded.edges:
        assert folded.nodes[source]["depth"] <= 2 and folded.nodes[target]["depth"] <= 2
    before = nx.has_path(graph, "tensor:0@v0", next(
        n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "output"))
    assert before and nx.has_path(folded, "tensor:0@v0", "layer:layers.0.0#0")


def test_collapse_counts_merged_parallel_edges(graphs: dict) -> None:
    folded = collapse(graphs["reused_module"], 0)
    assert set(folded.nodes) == {"layer:#0", "tensor:0@v0"}
    assert folded.edges["tensor:0@v0", "layer:#0"]["count"] >= 1
    assert folded.nodes["layer:#0"]["collapsed"] == graphs["reused_module"].number_of_nodes() - 2


@pytest.mark.parametrize("depth", [-1, 1.5, True, "2"])
def test_collapse_rejects_bad_depths(graphs: dict, depth) -> None:
    with pytest.raises(ValueError, match="depth must be a whole number >= 0, got"):
        collapse(graphs["gpt2"], depth)
