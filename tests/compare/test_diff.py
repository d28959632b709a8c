"""diff(): two recordings of models that differ in one known way give exactly that difference."""

from __future__ import annotations

import math

import networkx as nx
import pytest
from torch import nn

import torchgraphrec as tgr
from compare.cases import gpt2, recorded, train_and_eval
from helpers import nodes_of


def params(graph: nx.DiGraph, prefix: str = "") -> int:
    return sum(math.prod(a["shape"]) for a in nodes_of(graph, "param").values()
               if a["qualname"].startswith(prefix))


def kinds(graph: nx.DiGraph, nodes) -> dict[str, set]:
    found: dict[str, set] = {}
    for node in nodes:
        found.setdefault(graph.nodes[node]["kind"], set()).add(node)
    return found


def test_identical_models_give_an_empty_diff() -> None:
    found = tgr.diff(recorded(), recorded())
    assert not found
    assert (found.added, found.removed, dict(found.changed)) == (frozenset(), frozenset(), {})
    assert not found.edges_added and not found.edges_removed
    assert len(found.matches) == found.a.number_of_nodes() == found.b.number_of_nodes()
    assert {status for _, status in found.union.nodes(data="diff")} == {"same"}
    assert not any(found.subtree_changed(n) for n, a in found.union.nodes(data=True)
                   if a["kind"] == "layer")
    counts = {kind: len(nodes_of(found.b, kind)) for kind in ("layer", "op")}
    assert found.summary() == (f"same: {counts['layer']} calls, {counts['op']} ops, "
                               f"{params(found.b):,} params; nothing differs")


def test_a_widened_linear_changes_its_settings_params_and_shapes_only() -> None:
    found = tgr.diff(recorded(width=16), recorded(width=32))
    assert not found.added and not found.removed
    stem = found.changed["layer:stem#0"]
    assert stem["settings"] == ("in_features=8, out_features=16, bias=True",
                                "in_features=8, out_features=32, bias=True")
    assert stem["num_params"] == (8 * 16 + 16, 8 * 32 + 32)
    assert stem["output_shapes"] == (((3, 16),), ((3, 32),))
    assert found.changed["param:stem.weight"] == {"shape": ((16, 8), (32, 8))}
    assert found.changed["param:head.weight"] == {"shape": ((4, 16), (4, 32))}
    for node, changes in found.changed.items():  # nothing but sizes moved
        assert set(changes) <= {"settings", "num_params", "shape", "input_shapes",
                                "output_shapes"}, node
    delta = params(found.b) - params(found.a)
    assert f"parameters {params(found.a):,} -> {params(found.b):,} (+{delta:,})" in found.summary()
    assert "changed stem Linear: out_features=16 -> 32" in found.summary()


def test_an_added_block_is_one_subtree_under_its_container() -> None:
    found = tgr.diff(recorded(blocks=1), recorded(blocks=2))
    added = kinds(found.b, found.added)
    assert added["layer"] == {"layer:blocks.1#0", "layer:blocks.1.fc#0", "layer:blocks.1.act#0"}
    assert added["param"] == {"param:blocks.1.fc.weight", "param:blocks.1.fc.bias"}
    inside = {found.b.nodes[n]["parent"] for n in added["op"]}
    assert added["op"] and inside <= added["layer"]
    assert not found.removed
    assert [found.subtree_changed(f"layer:{name}#0") for name in ("", "stem", "blocks",
            "blocks.0", "blocks.1", "head")] == [True, False, True, False, True, False]
    line = found.summary().splitlines()[1]
    assert line.startswith("  added under blocks: blocks.1 (Block); 3 calls, ")
    assert line.endswith(f"params +{params(found.b, 'blocks.1.'):,}")


def test_a_removed_dropout_is_its_call_and_its_ops() -> None:
    a, b = recorded(dropout=True), recorded(dropout=False)
    found = tgr.diff(a, b)
    removed = kinds(found.a, found.removed)
    assert removed["layer"] == {"layer:drop#0"}
    assert removed["op"] and {found.a.nodes[n]["parent"] for n in removed["op"]} == {"layer:drop#0"}
    assert "param" not in removed and not kinds(found.b, found.added).get("layer")
    assert "  removed under Net: drop (Dropout); 1 call, " in found.summary()
    assert found.union.nodes["layer:drop#0"]["diff"] == "removed"


def test_a_changed_activation_changes_the_type_and_swaps_the_ops() -> None:
    found = tgr.diff(recorded(act=nn.ReLU), recorded(act=nn.GELU))
    assert found.changed["layer:blocks.0.act#0"]["type"] == ("ReLU", "GELU")
    removed, added = kinds(found.a, found.removed), kinds(found.b, found.added)
    assert {found.a.nodes[n]["name"] for n in removed["op"]} == {"relu"}
    assert {found.b.nodes[n]["name"] for n in added["op"]} == {"gelu"}
    assert set(removed) == set(added) == {"op", "tensor"}  # and the tensors they made
    for graph, tensors in ((found.a, removed["tensor"]), (found.b, added["tensor"])):
        assert {p for t in tensors for p in graph.predecessors(t)} <= removed["op"] | added["op"]
    assert "changed blocks.0.act: ReLU -> GELU; ops +gelu -relu" in found.summary()


def test_train_against_eval_shows_the_ops_that_differ() -> None:
    found = tgr.diff(*train_and_eval())
    layers = nodes_of(found.b, "layer")
    assert {node: found.changed[node]["training"] for node in layers} == {
        node: (True, False) for node in layers}
    ops = [(found.a, n) for n in found.removed] + [(found.b, n) for n in found.added]
    ops = [(g, n) for g, n in ops if g.nodes[n]["kind"] == "op"]
    ops += [(found.b, n) for n in found.changed if found.b.nodes[n]["kind"] == "op"]
    assert ops, "eval mode ran the same ops as train mode"
    assert {g.nodes[g.nodes[n]["parent"]]["type"] for g, n in ops} <= {"Dropout", "BatchNorm2d"}
    summary = found.summary()
    assert f"  training True -> False in {len(layers)} calls" in summary
    assert "changed 3 Dropout: ops" in summary or "changed 1 BatchNorm2d: ops" in summary


def test_gpt2_with_a_third_layer() -> None:
    pytest.importorskip("transformers")
    found = tgr.diff(gpt2(2), gpt2(3))
    added = kinds(found.b, found.added)
    block = lambda graph, prefix: {n for n, a in nodes_of(graph, "layer").items()  # noqa: E731
                                   if (a["qualname"] + ".").startswith(prefix)}
    assert added["layer"] == block(found.b, "h.2.")
    assert len(added["layer"]) == len(block(found.b, "h.1."))
    assert added["param"] == {n for n, a in nodes_of(found.b, "param").items()
                              if a["qualname"].startswith("h.2.")}
    assert not found.removed
    assert [found.subtree_changed(f"layer:{q}#0") for q in ("h.0", "h.1", "h.2", "ln_f")] == [
        False, False, True, False]
    assert found.summary().splitlines()[1].startswith(
        f"  added under GPT2Model: h.2 (GPT2Block); {len(added['layer'])} calls, ")
    assert f"(+{params(found.b, 'h.2.'):,})" in found.summary().splitlines()[0]


def test_the_union_follows_the_schema_and_marks_every_node() -> None:
    found = tgr.diff(recorded(dropout=True, act=nn.ReLU), recorded(dropout=False, act=nn.GELU))
    union = found.union
    tgr.validate(union)
    statuses = dict(union.nodes(data="diff"))
    assert sum(s == "removed" for s in statuses.values()) == len(found.removed)
    assert {n for n, s in statuses.items() if s == "added"} == found.added
    assert {n for n, s in statuses.items() if s == "changed"} == set(found.changed)
    assert union.nodes["layer:blocks.0.act#0"]["diff_changes"]["type"] == ("ReLU", "GELU")
    assert nx.utils.graphs_equal(tgr.from_json(tgr.to_json(union)), union)


def test_removed_nodes_keep_their_ids_unless_b_uses_them() -> None:
    found = tgr.diff(recorded(act=nn.ReLU), recorded(act=nn.GELU))
    [relu] = [n for n in found.removed if found.a.nodes[n]["kind"] == "op"]
    in_union = relu if relu not in found.b else relu + "~a"
    assert found.union.nodes[in_union]["name"] == "relu"
    assert found.union.nodes[in_union]["diff"] == "removed"


def test_paths_graphs_and_recordings_are_all_accepted(tmp_path) -> None:
    a, b = recorded(), recorded(width=12)
    path = a.render(tmp_path / "a.json")
    assert tgr.diff(path, b.graph).changed == tgr.diff(a, b).changed
    assert not tgr.diff(str(path), a)


def test_wrong_inputs_are_refused() -> None:
    with pytest.raises(TypeError, match="b must be a Recording, a networkx.DiGraph or the path "
                                        "of a saved recording, got int: 3"):
        tgr.diff(recorded(), 3)
    other = recorded().graph.copy()
    other.graph["ops"] = "none"
    with pytest.raises(ValueError, match="cannot match ops recorded as '.+' with ops recorded "
                                         "as 'none'"):
        tgr.diff(recorded(), other)
    with pytest.raises(ValueError, match="not a layer call of the diff's union graph: 'param:"):
        tgr.diff(recorded(), recorded()).subtree_changed("param:stem.weight")


def test_diff_needs_no_torch() -> None:
    import subprocess
    import sys

    script = ("import sys, torchgraphrec as t; assert 'torch' not in sys.modules; "
              "t.diff; from torchgraphrec.compare import summary, union; "
              "assert 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
