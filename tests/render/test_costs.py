"""Costs on the drawing: color_by a cost with a legend in units, inclusive boxes, show_costs."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import fresh
from render.layout import clusters, drawn_nodes, layout, title_of
from torchgraphrec.render.engine import run_engine
from torchgraphrec.render.labels import cost_line, cost_text
from torchgraphrec.render.theme import GREYS, SCALE


class Tower(nn.Module):
    """Linear layers of growing width (FLOPs spanning decades), two of them in a block."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 256))
        self.head = nn.Linear(256, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.small(x)))


def linear_flops(rows: int, inputs: int, outputs: int) -> int:
    """A linear layer's FLOPs as PyTorch counts them: a multiply and an add per weight and row."""
    return 2 * rows * inputs * outputs


@pytest.fixture(scope="module")
def tower() -> tgr.Recording:
    torch.manual_seed(0)
    return tgr.record(Tower(), torch.randn(3, 4), flops=True, memory=True)


def boxes(recording: tgr.Recording, **options: Any) -> dict[str, dict[str, Any]]:
    """The drawn nodes by graph id (``layer:head#0``), and the legend as ``legend``."""
    drawing = layout(recording.to_dot(**options))
    return {key.removeprefix("n-"): node for key, node in drawn_nodes(drawing).items()}


def lines(node: dict[str, Any]) -> list[str]:
    return node["label"].split("\\n")


def legend_text(node: dict[str, Any]) -> str:
    """The legend's words, in order, without its markup."""
    return " ".join(html.unescape(re.sub(r"<[^>]*>", " ", node["label"])).split())


def test_the_recording_has_the_flops_the_formula_gives(tower) -> None:
    graph = tower.graph
    assert graph.nodes["layer:small#0"]["flops"] == linear_flops(3, 4, 4)
    block = linear_flops(3, 4, 64) + linear_flops(3, 64, 256)
    assert graph.nodes["layer:block#0"]["flops"] == block
    assert graph.nodes["layer:block.1#0"]["flops"] == 0


def test_color_by_flops_fills_pale_to_dark_with_a_legend_in_units(tower) -> None:
    drawn = boxes(tower, color_by="flops", depth=None)
    assert drawn["layer:block.2#0"]["fillcolor"] == SCALE[-1]  # the costliest, darkest
    assert drawn["layer:block.2#0"]["fontcolor"] == "#ffffff"
    assert drawn["layer:block.1#0"]["fillcolor"] == SCALE[0]  # a ReLU: no FLOPs, palest
    assert drawn["layer:block.1#0"]["fontcolor"] == "#000000"
    fills = [drawn[f"layer:{name}#0"]["fillcolor"] for name in ("small", "block.0", "block.2")]
    assert [SCALE.index(fill) for fill in fills] == sorted(SCALE.index(fill) for fill in fills)
    legend = legend_text(drawn["legend"])
    smallest, largest = linear_flops(3, 4, 4), linear_flops(3, 64, 256)
    assert legend == (f"forward FLOPs (log scale) ≤ {cost_text(smallest, 'flops')} "
                      f"{cost_text((smallest * largest) ** 0.5, 'flops')} "
                      f"{cost_text(largest, 'flops')}")
    assert legend.endswith("98.3 kFLOPs")


@pytest.mark.needs("saved_bytes")
def test_boxes_at_depth_k_show_what_is_inside_them(tower) -> None:
    block = linear_flops(3, 4, 64) + linear_flops(3, 64, 256)
    at_1 = boxes(tower, color_by="flops", show_costs=True, depth=1)
    assert lines(at_1["layer:block#0"])[-1].startswith(f"{cost_text(block, 'flops')} · ")
    assert at_1["layer:block#0"]["fillcolor"] == SCALE[-1]
    assert at_1["layer:small#0"]["fillcolor"] != SCALE[-1]
    # drawn open, the block is a cluster whose title holds the same sum; it is not filled
    drawing = layout(tower.to_dot(color_by="flops", show_costs=True, depth=None))
    cluster = clusters(drawing)["c-layer:block#0"]
    assert title_of(cluster).split("\\l")[1] == lines(at_1["layer:block#0"])[-1]
    assert cluster["fillcolor"] not in SCALE


@pytest.mark.needs("saved_bytes")
def test_show_costs_adds_flops_and_saved_bytes_never_times(tower) -> None:
    drawn = boxes(tower, show_costs=True, depth=None)
    graph = tower.graph
    for name in ("small", "block.0", "block.2", "head"):
        attrs = graph.nodes[f"layer:{name}#0"]
        assert lines(drawn[f"layer:{name}#0"])[-1] == cost_line(attrs)
        assert cost_line(attrs).startswith(cost_text(attrs["flops"], "flops"))
    # the ReLU saves its result, 3×64 floats, which the next Linear also needs: counted
    # once, where it was saved first; a zero is left out
    relu, wide = graph.nodes["layer:block.1#0"], graph.nodes["layer:block.2#0"]
    assert (relu["saved_bytes"], cost_line(relu)) == (3 * 64 * 4, "768 B")
    assert (wide["saved_bytes"], cost_line(wide)) == (0, "98.3 kFLOPs")
    relu = graph.nodes["layer:block.1#0"]
    assert lines(drawn["layer:block.1#0"])[-1] == cost_text(relu["saved_bytes"], "saved_bytes")
    assert legend_text(drawn["legend"]) == "costs: forward FLOPs · activations saved for backward"
    assert not any(re.search(r"\d (ms|µs|ns|s)\b", node["label"]) for node in drawn.values())
    timed = boxes(tower, show_costs=True, color_by="forward_ms", depth=None)
    assert re.search(r" · [\d.]+ (ms|µs)$", lines(timed["layer:head#0"])[-1])
    assert legend_text(timed["legend"]).startswith("forward time")


def test_drawings_with_costs_are_the_same_on_every_run() -> None:
    def dot() -> str:
        torch.manual_seed(0)
        recording = tgr.record(Tower(), torch.randn(3, 4), flops=True, memory=True)
        return recording.to_dot(color_by="saved_bytes", show_costs=True, depth=None)

    assert dot() == dot()  # no time leaks into the drawing


@pytest.mark.needs("saved_bytes")
def test_saved_bytes_in_bytes_and_the_paper_theme_in_greys(tower) -> None:
    drawn = boxes(tower, color_by="saved_bytes", theme="paper", depth=None)
    legend = legend_text(drawn["legend"])
    assert legend.startswith("activations saved for backward")
    assert re.search(r"\d B\b|\d kB\b", legend)
    fills = {node.get("fillcolor") for key, node in drawn.items() if key.startswith("layer:")}
    assert fills <= set(GREYS) and len(fills) > 1


def test_a_folded_run_of_calls_that_cost_the_same_says_each() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])
    with torch.no_grad():  # nothing saved: the three calls cost the same
        recording = tgr.record(model, torch.randn(2, 8), flops=True, memory=True)
    [box] = [node for key, node in boxes(recording, show_costs=True).items()
             if key.startswith("layer:") and "× 3" in lines(node)]
    first = recording.graph.nodes["layer:0#0"]
    assert first["flops"] == linear_flops(2, 8, 8)
    assert lines(box)[-1] == f"{cost_line(first)} each"


@pytest.mark.needs("saved_bytes")
def test_a_folded_run_of_calls_that_cost_differently_never_says_each_for_those() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])
    recording = tgr.record(model, torch.randn(2, 8), flops=True, memory=True)
    calls = [recording.graph.nodes[f"layer:{k}#0"] for k in range(3)]
    saved = sorted(call["saved_bytes"] for call in calls)
    assert saved[0] < saved[-1]  # the first call's input is the model's: not counted
    assert {call["flops"] for call in calls} == {linear_flops(2, 8, 8)}
    [box] = [node for key, node in boxes(recording, show_costs=True).items()
             if key.startswith("layer:") and "× 3" in lines(node)]
    assert lines(box)[-1] == (f"{cost_text(linear_flops(2, 8, 8), 'flops')} each · "
                              f"{cost_text(saved[0], 'saved_bytes')}–"
                              f"{cost_text(saved[-1], 'saved_bytes')}")


@pytest.mark.parametrize("grad", [False, True])
def test_without_costs_recorded_show_costs_adds_nothing(grad: bool) -> None:
    torch.manual_seed(0)
    with torch.set_grad_enabled(grad):  # neither flops=True nor memory=True: no costs
        recording = tgr.record(Tower(), torch.randn(3, 4))
    assert recording.to_dot(show_costs=True) == recording.to_dot()
    with pytest.warns(UserWarning, match=r"color_by='flops': the recording has no 'flops'"):
        assert recording.to_dot(color_by="flops") == recording.to_dot()


@pytest.mark.parametrize("name", ["flops", "grad_output.rmss"])
def test_color_by_a_value_the_recording_lacks_warns_once_naming_the_values_it_has(
        name: str) -> None:
    import warnings

    torch.manual_seed(0)
    recording = tgr.record(Tower(), torch.randn(3, 4))  # no flops=True, no probes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dot = recording.to_dot(color_by=name)
    [warning] = caught  # once, however many nodes lack it
    message = str(warning.message)
    assert message.startswith(f"color_by={name!r}: the recording has no {name!r} value, so "
                              "nothing is coloured (values it has: "), message
    has = message.partition("values it has: ")[2]
    assert "'forward_ms'" in has and "'params'" in has and "'flops'" not in has
    assert warning.category is UserWarning and "tgr-legend" not in dot
    assert warning.filename == __file__  # the user's line, not one inside the renderer
    with pytest.warns(UserWarning, match=r"color_by='flops'.*values it has: .*'forward_ms'"):
        recording.to_dot(color_by="flops", depth=0)


def test_color_by_a_value_the_drawing_has_does_not_warn(tower: tgr.Recording) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "tgr-legend" in tower.to_dot(color_by="forward_ms")


def test_a_cnn_coloured_by_flops_darkens_its_costliest_stage() -> None:
    case = fresh("resnet_like")
    recording = tgr.record(case.model, case.args, flops=True, memory=True)
    drawn = boxes(recording, color_by="flops", show_costs=True, depth=1)
    graph = recording.graph
    calls = {key: graph.nodes[key]["flops"] for key in drawn if key.startswith("layer:")}
    costliest = max(calls, key=calls.get)
    assert drawn[costliest]["fillcolor"] == SCALE[-1]
    for key, flops in calls.items():
        assert cost_text(flops, "flops") in drawn[key]["label"] or flops == 0, key


def test_the_legend_ticks_stand_apart_however_long_their_values() -> None:
    # three values of 11 characters ("65.5 kFLOPs") under 18 pt colour cells ran together
    torch.manual_seed(0)
    recording = tgr.record(nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 256)),
                           torch.randn(2, 4), flops=True)
    drawing = json.loads(run_engine(recording.to_dot(color_by="flops"), "json"))
    legend = next(o for o in drawing["objects"] if o.get("id") == "legend")
    texts = [op for op in legend["_ldraw_"] if op["op"] == "T"][1:]  # after the title
    assert [op["text"] for op in texts] == ["0 FLOPs", "32.8 kFLOPs", "65.5 kFLOPs"]
    for left, right in zip(texts, texts[1:]):  # the engine's own text widths
        assert left["pt"][0] + left["width"] + 6 <= right["pt"][0], (left, right)
