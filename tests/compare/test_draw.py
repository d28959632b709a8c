"""GraphDiff.render: the union drawn with each node, cluster and edge styled by what changed."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
from torch import nn

import torchgraphrec as tgr
from compare.cases import gpt2, recorded, train_and_eval
from render.layout import clusters, drawn_nodes, layout, title_of
from torchgraphrec.render.theme import DEFAULT, PAPER


class Drawing:
    """A diff drawn to DOT by ``GraphDiff.render``, read back through the engine's layout."""

    def __init__(self, found: tgr.GraphDiff, folder: Path, **options: Any) -> None:
        self.dot = found.render(folder / "diff.dot", **options).read_text(encoding="utf-8")
        drawing = layout(self.dot)
        self.nodes = drawn_nodes(drawing)
        self.clusters = clusters(drawing)
        ids = {o["_gvid"]: o.get("id") for o in drawing.get("objects", [])}
        self.edges = {(ids[e["tail"]], ids[e["head"]]): e for e in drawing.get("edges", [])
                      if e.get("style") != "invis"}
        self.theme = PAPER if options.get("theme") == "paper" else DEFAULT

    def node(self, graph_id: str) -> dict[str, Any]:
        return self.nodes[f"n-{graph_id}"]

    def lines(self, graph_id: str) -> list[str]:
        return self.node(graph_id)["label"].split("\\n")

    def status(self, graph_id: str) -> str:
        """The status whose attributes the node is drawn with."""
        return _status(self.node(graph_id), self.theme.diff_node, graph_id)

    def cluster_status(self, graph_id: str) -> str:
        return _status(self.clusters[f"c-{graph_id}"], self.theme.diff_cluster, graph_id)

    def edge_status(self, tail: str, head: str) -> str:
        edge = self.edges[f"n-{tail}", f"n-{head}"]
        return next(status for status, attrs in self.theme.diff_edge.items()
                    if attrs["color"] == edge["color"])

    def legend(self) -> str:
        return self.nodes["legend"]["label"]


def _status(drawn: dict[str, Any], statuses: dict[str, dict[str, str]], name: str) -> str:
    """The one status all of whose attributes ``drawn`` has (its style words among them)."""
    def has(attrs: dict[str, str]) -> bool:
        words = set(drawn.get("style", "").split(","))
        return all(set(v.split(",")) <= words if k == "style" else drawn.get(k) == v
                   for k, v in attrs.items())

    found = [status for status, attrs in statuses.items() if has(attrs)]
    assert len(found) == 1, (name, found, drawn)
    return found[0]


def test_a_widened_linear_is_amber_with_old_and_new(tmp_path: Path) -> None:
    drawn = Drawing(tgr.diff(recorded(width=16), recorded(width=32)), tmp_path, depth=None)
    assert drawn.status("layer:stem#0") == "changed"
    assert drawn.lines("layer:stem#0") == [
        "stem: Linear", "8→32", "3×8 → 3×32", "288 params", "out_features=16 → 32",
        "weight 16×8 → 32×8", "bias 16 → 32"]  # its own params are not "inside" again
    assert drawn.status("layer:head#0") == "changed"
    assert "weight 4×16 → 4×32" in drawn.lines("layer:head#0")
    # the same in itself, only the shapes reaching it changed: outlined, shapes written
    assert drawn.status("layer:blocks.0.act#0") == "inside"
    assert "in, out 3×16 → 3×32" in drawn.lines("layer:blocks.0.act#0")
    assert drawn.status("tensor:0@v0") == "same"  # the model's input
    assert drawn.cluster_status("layer:#0") == "inside"
    assert title_of(drawn.clusters["c-layer:#0"]).startswith("Net\\l484 → 1.5k params")
    legend = drawn.legend()
    assert "changed: old → new" in legend and "unchanged" in legend
    assert "+ added" not in legend and "− removed" not in legend  # only what is drawn


def test_an_added_block_is_green_and_marked_at_every_depth(tmp_path: Path) -> None:
    found = tgr.diff(recorded(blocks=1), recorded(blocks=2))
    deep = Drawing(found, tmp_path, depth=None)
    assert deep.cluster_status("layer:blocks.1#0") == "added"
    assert title_of(deep.clusters["c-layer:blocks.1#0"]).startswith("+ 1: Block")
    for call in ("fc", "act"):
        assert deep.status(f"layer:blocks.1.{call}#0") == "added"
        assert deep.lines(f"layer:blocks.1.{call}#0")[0].startswith(f"+ {call}: ")
    assert deep.status("layer:blocks.0.fc#0") == "same"
    at_2 = Drawing(found, tmp_path, depth=2)
    assert at_2.status("layer:blocks.1#0") == "added"
    assert at_2.status("layer:blocks.0#0") == "same"
    assert at_2.edge_status("layer:blocks.0#0", "layer:blocks.1#0") == "added"
    # depth=1: the container holding it says what differs inside
    at_1 = Drawing(found, tmp_path, depth=1)
    assert at_1.status("layer:blocks#0") == "changed"
    ops = sum(found.b.nodes[n]["kind"] == "op" for n in found.added)
    inside = f"inside: 3 calls, {ops} ops, 2 params added"
    assert at_1.lines("layer:blocks#0")[-2:] == ["272 → 544 params", inside]
    assert at_1.status("layer:stem#0") == at_1.status("layer:head#0") == "same"
    at_0 = Drawing(found, tmp_path, depth=0)
    assert at_0.status("layer:#0") == "changed"
    assert at_0.lines("layer:#0")[-1] == inside


def test_a_removed_dropout_is_red_and_dashed_and_so_are_its_edges(tmp_path: Path) -> None:
    drawn = Drawing(tgr.diff(recorded(dropout=True), recorded(dropout=False)), tmp_path)
    drop = drawn.node("layer:drop#0")
    assert drawn.status("layer:drop#0") == "removed"
    assert "dashed" in drop["style"].split(",") and drop["label"].startswith("− drop: Dropout")
    assert drawn.edge_status("op:add#3", "layer:drop#0") == "removed"
    assert drawn.edge_status("layer:drop#0", "layer:head#0") == "removed"
    assert drawn.edges["n-op:add#3", "n-layer:drop#0"]["style"] == "dashed"
    assert drawn.edge_status("op:add#3", "layer:head#0") == "added"  # the new wiring
    assert drawn.status("layer:head#0") == "same"
    assert drawn.cluster_status("layer:#0") == "inside"
    # an edge's status is in the legend even where no node has it
    assert "+ added" in drawn.legend() and "− removed" in drawn.legend()


def test_a_changed_activation_names_both_types(tmp_path: Path) -> None:
    found = tgr.diff(recorded(act=nn.ReLU), recorded(act=nn.GELU))
    boxes = Drawing(found, tmp_path)
    assert boxes.status("layer:blocks.0.act#0") == "changed"
    assert boxes.lines("layer:blocks.0.act#0") == ["act: ReLU → GELU", "3×16 → 3×16",
                                                   "inside: 1 op added; 1 op removed"]
    assert boxes.status("layer:blocks.0.fc#0") == "same"
    ops = Drawing(found, tmp_path, expand_leaves=True)
    assert ops.cluster_status("layer:blocks.0.act#0") == "changed"
    assert title_of(ops.clusters["c-layer:blocks.0.act#0"]) == "act: ReLU → GELU"
    [relu] = [n for n in found.removed if found.a.nodes[n]["kind"] == "op"]
    [gelu] = [n for n in found.added if found.b.nodes[n]["kind"] == "op"]
    relu = relu if relu not in found.b else relu + "~a"
    assert (ops.status(relu), ops.lines(relu)[0]) == ("removed", "− relu")
    assert (ops.status(gelu), ops.lines(gelu)[0]) == ("added", "+ gelu")


def test_train_against_eval_shows_the_ops_that_differ(tmp_path: Path) -> None:
    found = tgr.diff(*train_and_eval())
    boxes = Drawing(found, tmp_path)
    assert "every call: train → eval" in boxes.legend()  # said once, not on every box
    assert boxes.status("layer:1#0") == boxes.status("layer:3#0") == "changed"
    # eval's dropout hands its input back: no op (train's drew one)
    assert boxes.lines("layer:3#0")[-1] == "inside: 1 op removed"
    for plain in ("layer:0#0", "layer:2#0", "layer:4#0", "layer:5#0"):
        assert boxes.status(plain) == "same", plain
        assert not any("train" in line for line in boxes.lines(plain))
    ops = Drawing(found, tmp_path, expand_leaves=True)
    [norm] = [n for n in found.changed if found.b.nodes[n].get("name") == "batch_norm"]
    assert ops.status(norm) == "changed" and "training=True → (none)" in ops.lines(norm)
    [counter] = [n for n in found.removed if found.a.nodes[n].get("name") == "add_"]
    assert ops.status(counter) == "removed"  # num_batches_tracked += 1, train mode only
    assert ops.cluster_status("layer:1#0") == "inside"


@pytest.fixture(scope="module")
def gpt2_diff() -> tgr.GraphDiff:
    pytest.importorskip("transformers")
    return tgr.diff(gpt2(2), gpt2(3))


@pytest.mark.needs("transformers_5")
def test_gpt2_with_a_third_layer_shows_it_at_depth_1_and_2(gpt2_diff, tmp_path: Path) -> None:
    at_1 = Drawing(gpt2_diff, tmp_path, depth=1)
    assert at_1.status("layer:h.2#0") == "added"
    assert at_1.lines("layer:h.2#0")[0] == "+ h.2: GPT2Block"
    assert at_1.status("layer:h.0#0") == "same" and at_1.lines("layer:h.0#0")[-1] == "× 2"
    assert at_1.cluster_status("layer:#0") == "inside"  # the model: where to look
    assert at_1.edge_status("layer:h.0#0", "layer:h.2#0") == "added"
    assert at_1.edge_status("layer:h.2#0", "layer:ln_f#0") == "added"
    assert at_1.edge_status("layer:h.0#0", "layer:ln_f#0") == "removed"
    assert {at_1.status(n[2:]) for n in at_1.nodes if n.startswith("n-")} == {"same", "added"}
    at_2 = Drawing(gpt2_diff, tmp_path, depth=2)
    assert at_2.cluster_status("layer:h.2#0") == "added"
    added = {n[2:] for n in at_2.nodes if n.startswith("n-") and at_2.status(n[2:]) == "added"}
    assert added == {n for n in gpt2_diff.added if gpt2_diff.b.nodes[n]["depth"] == 2
                     and gpt2_diff.b.nodes[n]["kind"] in ("layer", "op")}
    assert at_2.cluster_status("layer:h.0#0") == "same"
    at_0 = Drawing(gpt2_diff, tmp_path, depth=0)
    assert at_0.status("layer:#0") == "changed"
    assert at_0.lines("layer:#0")[1:] == ["1×8 → 1×8×32", "29.7k → 42.4k params",
                                          "inside: 12 calls, 39 ops, 12 params added"]


def test_the_paper_theme_says_it_without_hue(tmp_path: Path) -> None:
    found = tgr.diff(recorded(act=nn.ReLU, dropout=True), recorded(act=nn.GELU, dropout=False))
    drawn = Drawing(found, tmp_path, theme="paper", expand_leaves=True)
    assert drawn.cluster_status("layer:drop#0") == "removed"
    assert drawn.cluster_status("layer:blocks.0.act#0") == "changed"
    colours = {o.get("color") for o in drawn.nodes.values()} - {None}
    assert colours <= {"#000000", "#b3b3b3"}  # the status is in the lines, not a hue


def test_a_diff_renders_to_every_drawing_format(tmp_path: Path) -> None:
    found = tgr.diff(recorded(blocks=1), recorded(blocks=2))
    svg = found.render(tmp_path / "d.svg", depth=2).read_text(encoding="utf-8")
    assert "+ 1: Block" in svg and DEFAULT.diff_node["added"]["fillcolor"] in svg
    assert found.render(tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    page = html.unescape(found.render(tmp_path / "d.html").read_text(encoding="utf-8"))
    assert page.count("<svg") > 1  # the report draws the union at each depth, marked
    assert "+ 1: Block" in page and "inside: 3 calls, " in page
    union = tgr.from_json(found.render(tmp_path / "d.json").read_text(encoding="utf-8"))
    assert union.nodes["layer:blocks.1#0"]["diff"] == "added"


def test_what_a_diff_cannot_be_drawn_as(tmp_path: Path) -> None:
    found = tgr.diff(recorded(), recorded(width=12))
    with pytest.raises(ValueError, match=r"unknown format for a diff: '.graphml' \(must be one "
                                         r"of \['.dot', '.gv', '.html', '.json'"):
        found.render(tmp_path / "d.graphml")
    with pytest.raises(ValueError, match="color_by='flops' cannot be drawn on a diff: its "
                                         "colours say what was added, removed and changed"):
        found.render(tmp_path / "d.svg", color_by="flops")
    with pytest.raises(TypeError, match="unknown option 'colour'"):
        found.render(tmp_path / "d.svg", colour="red")
    assert not list(tmp_path.iterdir())


def test_identical_models_draw_all_greyed(tmp_path: Path) -> None:
    drawn = Drawing(tgr.diff(recorded(), recorded()), tmp_path, depth=None)
    assert {drawn.status(n[2:]) for n in drawn.nodes if n.startswith("n-")} == {"same"}
    assert {drawn.cluster_status(c[2:]) for c in drawn.clusters} == {"same"}
    assert "unchanged" in drawn.legend() and "changed: old" not in drawn.legend()
