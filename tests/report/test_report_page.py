"""The report in a real browser: expanding in place, options, search, details, table,
timeline, the URL, a diff's sides and the notebook frame."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import fresh
from report.browser import open_page
from report.reportpage import act, centre, drawn_ids, element, loaded_report, state
from report.walk import settle
from torchgraphrec.render.dot import to_dot
from torchgraphrec.render.labels import xml_id
from torchgraphrec.report.html import to_html
from torchgraphrec.render.options import RenderOptions

ROOT = "#tgr"


@pytest.fixture(scope="module")
def recording() -> tgr.Recording:
    return tgr.record(*fresh("resnet_like"), backward=True, flops=True, memory=True)


@pytest.fixture(scope="module")
def report(recording, tmp_path_factory) -> Path:
    return recording.render(tmp_path_factory.mktemp("report") / "report.html")


def _dot(recording: tgr.Recording, **options: Any) -> str:
    """The static drawing the page composes."""
    return recording.to_dot(**vars(replace(RenderOptions(), **options)))


def _title(page: Any, node_id: str) -> Any:
    """A cluster's title: where a reader double-clicks it (its middle is another box)."""
    return element(page, node_id, "c").locator("text").first


def test_it_opens_as_the_static_drawing_and_opens_any_call_in_place(browser, recording,
                                                                  report) -> None:
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        assert state(page)["dot"] == _dot(recording)  # full depth, repeats folded
        clusters = drawn_ids(page, "cluster")
        assert "c-layer:stem#0" in clusters
        where = centre(_title(page, "layer:stem#0"))
        act(page, _title(page, "layer:stem#0").dblclick)
        # closed in place: a box where the cluster was, everything else still open
        assert drawn_ids(page, "cluster") == clusters - {"c-layer:stem#0"}
        box = element(page, "layer:stem#0", "n")
        assert "n-layer:stem.0#0" not in drawn_ids(page)
        moved = centre(box)
        assert abs(moved[0] - where[0]) < 120 and abs(moved[1] - where[1]) < 120
        act(page, box.dblclick)
        assert state(page)["dot"] == _dot(recording)  # opened again: the same drawing
        # a leaf's box opens to show its ops and offers no collapse while a box
        leaf = element(page, "layer:stem.0#0", "n")
        leaf.click()
        buttons = page.locator(f"{ROOT} .tgr-actions button").all_text_contents()
        assert buttons == ["Show its ops"]
        act(page, leaf.dblclick)
        assert "n-op:conv2d#0" in drawn_ids(page)
        assert page.locator(f"{ROOT} .tgr-actions button").all_text_contents() == ["Close"]
        # an op is no module: double-clicking it changes nothing
        layouts = page.get_attribute(ROOT, "data-layouts")
        element(page, "op:conv2d#0", "n").dblclick()
        page.wait_for_timeout(300)
        assert page.get_attribute(ROOT, "data-layouts") == layouts
    assert loaded.problems == []
    assert all(url.startswith("file:") for url in loaded.requests), loaded.requests


@pytest.mark.parametrize("depth", ["0", "1", "2", "all"])
def test_options_lay_out_again_at_any_depth(browser, recording, report, depth: str) -> None:
    level = None if depth == "all" else int(depth)
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        act(page, page.select_option, f"{ROOT} .tgr-depth", depth)
        assert state(page)["dot"] == _dot(recording, depth=level)
        options: dict[str, Any] = {"depth": level}
        for name, key in (("tensors", "include_tensors"), ("params", "include_params"),
                          ("ops", "include_ops"), ("fold", "fold_repeats"),
                          ("leaves", "expand_leaves")):
            box = page.locator(f'{ROOT} .tgr-opt[data-opt="{name}"]')
            options[key] = not box.is_checked()
            act(page, box.click)
            assert state(page)["dot"] == _dot(recording, **options), name
        act(page, page.select_option, f"{ROOT} .tgr-rankdir", "LR")
        assert state(page)["dot"] == _dot(recording, **options, rankdir="LR")
    assert loaded.problems == []


def test_folded_repeats_open_to_show_their_members(browser, report) -> None:
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        group = _title(page, "layer:layers.0#0")  # both stages, drawn once
        assert group.text_content() == "layers.0–1: Sequential \u00a0× 2"
        assert not {"n-layer:layers.1#0", "c-layer:layers.1#0"} & (
            drawn_ids(page) | drawn_ids(page, "cluster"))  # drawn once, by the first
        act(page, group.dblclick)
        shown = drawn_ids(page) | drawn_ids(page, "cluster")
        assert {"n-layer:layers.0#0", "n-layer:layers.1#0"} <= shown  # each repeat, closed
        act(page, element(page, "layer:layers.1#0", "n").dblclick)
        assert "c-layer:layers.1#0" in drawn_ids(page, "cluster")
    assert loaded.problems == []


def test_search_finds_the_boxes_the_view_can_show_and_steps_through_them(browser, recording,
                                                                        report) -> None:
    # the four Blocks: two in each stage, both stages drawn once while folded
    calls = [n for n, a in recording.graph.nodes(data=True) if a.get("type") == "Block"]
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        act(page, page.select_option, f"{ROOT} .tgr-depth", "1")
        search = page.locator(f"{ROOT} .tgr-search")
        search.fill("block")
        # folded, the later repeats are drawn by the first: one box holds all four
        assert state(page)["count"] == ("1 match (4 with the folded repeats) · 0 drawn, "
                                        "1 inside closed boxes (marked)")
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="fold"]').click)
        assert state(page)["count"].startswith(f"{len(calls)} matches · 0 drawn")
        held = page.locator(f"{ROOT} .tgr-canvas .tgr-holds")
        badges = page.locator(f"{ROOT} .tgr-canvas .tgr-badge text").all_text_contents()
        assert held.count() == len(badges) > 0 and sum(map(int, badges)) == len(calls)
        seen = []
        for step in range(len(calls)):
            search.press("Enter")
            settle(page)  # laid out again where the path to it had to open
            now = state(page)
            assert now["count"].startswith(f"{step + 1} of {len(calls)}")
            seen.append(now["selected"])
            target = element(page, now["selected"], "n")
            assert target.count() == 1  # drawn as itself: the path to it was opened
            x, y = centre(target)
            canvas = page.locator(f"{ROOT} .tgr-canvas").bounding_box()
            assert abs(x - canvas["x"] - canvas["width"] / 2) < 30  # zoomed to, in the middle
            assert abs(y - canvas["y"] - canvas["height"] / 2) < 30
            assert "tgr-current" in target.get_attribute("class")
        assert seen == sorted(calls, key=lambda n: recording.graph.nodes[n]["seq"])  # in order
        search.press("Shift+Enter")
        page.wait_for_function(f"document.querySelector('{ROOT} .tgr-count').textContent"
                               f".startsWith('{len(calls) - 1} of')")
        # a parameter is found only while parameters are shown, and then drawn as itself
        search.fill("layers.1.1.conv1.weight")
        assert state(page)["count"] == "0 matches"
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="params"]').click)
        act(page, search.press, "Enter")
        assert state(page)["selected"] == "param:layers.1.1.conv1.weight"
        holder = element(page, "param:layers.1.1.conv1.weight", "n")
        assert "tgr-current" in holder.get_attribute("class")
        assert page.text_content(f"{ROOT} .tgr-details-title") == "layers.1.1.conv1.weight"
    assert loaded.problems == []


def test_search_reads_what_the_page_shows_never_node_ids(browser, recording, report) -> None:
    # node ids matched too: "layer" found every call (layer:...), "op" every op, "v0"
    # every tensor, "0" every first call (#0)
    graph = recording.graph
    later = [n for n, a in graph.nodes(data=True) if a["kind"] == "layer" and a["call_index"] > 0]
    relu = graph.nodes[later[0]]
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="tensors"]').click)
        search = page.locator(f"{ROOT} .tgr-search")
        for query in ("layer:", "op:", "@v0", "#0"):
            search.fill(query)
            assert state(page)["count"] == "0 matches", query
        search.fill(f"{relu['qualname']}#{relu['call_index']}")  # a later call, as titled
        search.press("Enter")
        settle(page)
        assert state(page)["selected"] == later[0]
    assert loaded.problems == []


def test_details_speak_to_a_person(browser, report) -> None:
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        element(page, "layer:stem.0#0", "n").click()
        assert page.text_content(f"{ROOT} .tgr-details-title") == "stem.0"
        rows = dict(zip(page.locator(f"{ROOT} .tgr-row > span:first-child").all_text_contents(),
                        page.locator(f"{ROOT} .tgr-row > span:last-child").all_text_contents()))
        assert rows["type"] == "Conv2d" and rows["settings"] == "3→16, 3×3, pad 1, no bias"
        assert rows["inside"] == "ResNetLike › stem"
        assert rows["inputs"] == "x: 2×3×16×16 float32"
        assert rows["outputs"] == "2×16×16×16 float32"
        assert rows["its own"] == "weight 16×3×3×3" and rows["parameters"] == "432"
        assert rows["FLOPs"] == "442 kFLOPs" and rows["backward FLOPs"] == "442 kFLOPs"
        assert re.fullmatch(r"[\d.]+ (s|ms|µs|ns)", rows["forward"])
        assert "backward" in rows
        raw = page.locator(f"{ROOT} .tgr-raw")
        assert raw.get_attribute("open") is None  # folded below
        assert "t_start_ns" in raw.text_content() and "_settings" not in raw.text_content()
        # a link in the panel selects that call, opening the path to it
        page.locator(f"{ROOT} .tgr-details a", has_text="stem").click()
        page.wait_for_function(f"document.querySelector('{ROOT} .tgr-details-title')"
                               ".textContent === 'stem'")
    assert loaded.problems == []


class _TiedHead(torch.nn.Module):
    """GPT-2's tie: the head reads the embedding's weight, counted at the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def test_details_name_a_weight_a_call_reads_of_another_module(browser, tmp_path) -> None:
    # the head read "parameters: none", as if it had no weight
    path = tgr.record(_TiedHead(), torch.tensor([[1, 2]])).render(tmp_path / "tied.html")
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        element(page, "layer:head#0", "n").click()
        rows = dict(zip(page.locator(f"{ROOT} .tgr-row > span:first-child").all_text_contents(),
                        page.locator(f"{ROOT} .tgr-row > span:last-child").all_text_contents()))
        assert rows["parameters"] == "none of its own"
        assert rows["also reads"] == "embed.weight 10×4" and "its own" not in rows
        element(page, "layer:embed#0", "n").click()
        rows = dict(zip(page.locator(f"{ROOT} .tgr-row > span:first-child").all_text_contents(),
                        page.locator(f"{ROOT} .tgr-row > span:last-child").all_text_contents()))
        assert rows["parameters"] == "40" and "also reads" not in rows
    assert loaded.problems == []


@pytest.mark.needs("saved_bytes")
def test_table_sorts_by_cost_and_a_row_selects_and_pans(browser, recording, report) -> None:
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        heads = page.locator(f"{ROOT} .tgr-calls th").all_text_contents()
        assert heads[:5] == ["module", "type", "call", "output", "params"]
        assert {"FLOPs", "saved for backward", "forward", "backward"} <= set(heads)
        page.click(f'{ROOT} .tgr-calls th[data-key="flops"]')
        column = heads.index("FLOPs") + 1
        cells = f"{ROOT} .tgr-calls tbody td:nth-child({column})"
        read = "cells => cells.map(c => Number(c.dataset.value))"
        values = page.eval_on_selector_all(cells, read)
        assert values == sorted(values, reverse=True)
        assert values[0] == recording.graph.graph["flops"]
        assert page.locator(f"{ROOT} .tgr-calls tbody td:nth-child({column}) .tgr-bar").count() > 0
        page.click(f'{ROOT} .tgr-calls th[data-key="flops"]')
        again = page.eval_on_selector_all(cells, read)
        assert again == sorted(values)
        # a call folded away (the second block's second conv) is revealed and panned to
        row = page.locator(f"{ROOT} .tgr-calls tbody tr", has_text="layers.1.1.conv2")
        act(page, row.click)
        assert state(page)["selected"] == "layer:layers.1.1.conv2#0"
        assert "tgr-row-selected" in row.get_attribute("class")
        target = element(page, "layer:layers.1.1.conv2#0", "n")
        canvas = page.locator(f"{ROOT} .tgr-canvas").bounding_box()
        x, y = centre(target)
        assert abs(x - canvas["x"] - canvas["width"] / 2) < 30
        assert abs(y - canvas["y"] - canvas["height"] / 2) < 30
    assert loaded.problems == []


def test_timeline_nests_forward_and_backward_and_selects(browser, recording, report) -> None:
    calls = sum(1 for _, a in recording.graph.nodes(data=True) if a["kind"] == "layer")
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        for phase in ("forward", "backward"):
            bars = page.eval_on_selector_all(
                f"{ROOT} .tgr-timeline rect.tgr-{phase}",
                "rects => rects.map(r => [r.dataset.node, +r.getAttribute('x'),"
                " +r.getAttribute('width')])")
            assert len(bars) == calls
            spans = {int(n): (x, x + w) for n, x, w in bars}
            parents = page.evaluate("() => document.querySelector('#tgr').tgr.D.parent")
            for node, (start, end) in spans.items():
                parent = parents[node]
                if parent in spans:  # a call's bar lies inside its caller's
                    assert spans[parent][0] - 0.01 <= start and end <= spans[parent][1] + 0.5
        widest = max((w, n) for n, (x, end) in spans.items() if parents[n] != -1
                     for w in [end - x])[1]  # the longest backward of a call inside the model
        bar = page.locator(f'{ROOT} .tgr-timeline rect.tgr-backward[data-node="{widest}"]')
        bar.click()  # drawn already, or revealed first
        page.wait_for_function(f"document.querySelector('{ROOT}').tgr.selected === {widest}")
        page.wait_for_function(  # marked in both passes, once the drawing shows it
            f"document.querySelectorAll('{ROOT} .tgr-timeline rect.tgr-selected').length === 2")
        assert state(page)["selected"] == page.evaluate(
            f"document.querySelector('{ROOT}').tgr.D.ids[{widest}]")
        page.select_option(f"{ROOT} .tgr-colour", "flops")
        fills = page.eval_on_selector_all(f"{ROOT} .tgr-timeline rect.tgr-forward",
                                          "rects => new Set(rects.map(r => r.style.fill)).size")
        assert fills > 2  # coloured as the drawing is, over every call
        assert page.locator(f"{ROOT} .tgr-legend").is_visible()
    assert loaded.problems == []


def test_the_url_fragment_brings_back_the_same_view(browser, recording, report) -> None:
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        act(page, _title(page, "layer:stem#0").dblclick)
        act(page, page.locator(f"{ROOT} .tgr-opt[data-opt=tensors]").click)
        act(page, page.locator(f"{ROOT} .tgr-calls tbody tr", has_text="layers.1.0.conv1").click)
        before = state(page)
    assert before["hash"].startswith("#d=all&")
    with loaded_report(browser, report, "#d=7&r=XX") as stale:  # a link that cannot be
        assert state(stale.page)["dot"] == _dot(recording)  # the opening view instead
    with loaded_report(browser, report, before["hash"]) as again:
        again.page.wait_for_function(f"document.querySelector('{ROOT}').dataset.layouts >= 1")
        after = state(again.page)
        assert (after["dot"], after["selected"]) == (before["dot"], before["selected"])
        assert again.page.text_content(f"{ROOT} .tgr-details-title") == "layers.1.0.conv1"
    assert again.problems == []


def test_a_link_pasted_into_the_open_page_shows_its_view(browser, recording, report) -> None:
    # the fragment was read once, on opening: a link pasted into the tab, or Back and
    # Forward, changed the URL and nothing else
    with loaded_report(browser, report, "#d=1") as shared:
        wanted = state(shared.page)["dot"]
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        assert state(page)["dot"] != wanted
        act(page, page.evaluate, "location.hash = '#d=1'")
        settle(page)
        assert state(page)["dot"] == wanted
        assert page.input_value(f"{ROOT} .tgr-depth") == "1"
    assert loaded.problems == []


def test_a_link_with_its_selection_in_a_closed_box_keeps_the_box_closed(browser,
                                                                       report) -> None:
    # opening it revealed the selection: the link showed another view than it was made of
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        act(page, page.locator(f"{ROOT} .tgr-calls tbody tr", has_text="layers.1.0.conv1").click)
        act(page, page.select_option, f"{ROOT} .tgr-depth", "1")
        before = state(page)
    with loaded_report(browser, report, before["hash"]) as again:
        again.page.wait_for_function(f"document.querySelector('{ROOT}').dataset.layouts >= 1")
        settle(again.page)
        after = state(again.page)
    assert (after["dot"], after["selected"], after["hash"]) == (before["dot"], before["selected"],
                                                                before["hash"])


def test_an_arrow_key_pans_a_share_of_the_canvas_and_a_query_moves_nothing(browser,
                                                                          report) -> None:
    with loaded_report(browser, report) as loaded:
        page = loaded.page
        canvas = page.locator(f"{ROOT} .tgr-canvas")
        top, width = canvas.bounding_box()["y"], canvas.bounding_box()["width"]
        page.focus(f"{ROOT} .tgr-canvas")
        box = element(page, "layer:stem#0")
        x = box.bounding_box()["x"]
        page.keyboard.press("ArrowRight")
        # after Fit the viewBox has the drawing's aspect, not the canvas's: the step was
        # a share of the drawing's width (25 px of a 915 px canvas)
        assert x - box.bounding_box()["x"] == pytest.approx(0.15 * width, abs=2)
        page.fill(f"{ROOT} .tgr-search", "conv")
        settle(page)
        assert "matches" in page.text_content(f"{ROOT} .tgr-count")
        assert canvas.bounding_box()["y"] == top  # the toolbar did not rewrap
    assert loaded.problems == []


def test_a_diff_shows_side_a_side_b_or_both(browser, tmp_path: Path) -> None:
    torch.manual_seed(0)
    old = tgr.record(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1),
                                   nn.Linear(8, 2)).eval(), torch.randn(2, 4))
    new = tgr.record(nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.Linear(16, 2)).eval(),
                     torch.randn(2, 4))
    diff = tgr.diff(old, new)
    path = tmp_path / "diff.html"
    path.write_text(to_html(diff.union), encoding="utf-8")
    ops = {n: a["diff"] for n, a in diff.union.nodes(data=True) if a["kind"] == "op"}
    # a side's own op named as the other side's is "op:linear#2~a", drawn "op:linear#2_7e_a"
    added = {xml_id("n", n) for n, status in ops.items() if status == "added"}
    removed = {xml_id("n", n) for n, status in ops.items() if status == "removed"}
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        side = f"{ROOT} .tgr-side"
        assert page.locator(side).is_visible()
        assert state(page)["dot"] == to_dot(diff.union)  # the DOT writer's marks
        assert "out_features=8 → 16" in element(page, "layer:0#0", "n").text_content()
        act(page, page.select_option, side, "a")
        label = element(page, "layer:0#0", "n").text_content()
        assert "4→8" in label and "4→16" not in label  # as it was in A, plain
        assert "ReLU" in element(page, "layer:1#0", "n").text_content()
        assert page.locator(f"{ROOT} .tgr-canvas #legend").count() == 0
        act(page, page.locator(f"{ROOT} .tgr-opt[data-opt=leaves]").click)  # every op drawn
        side_a = drawn_ids(page)
        assert not added & side_a and removed & side_a
        act(page, page.select_option, side, "b")
        side_b = drawn_ids(page)
        assert added & side_b and not removed & side_b
        act(page, page.select_option, side, "both")
        both = drawn_ids(page)
        assert added | removed <= both
        assert page.locator(f"{ROOT} .tgr-canvas #legend").count() == 1
    assert loaded.problems == []


def test_the_notebook_frame_works_in_an_exported_notebook(browser, recording,
                                                         tmp_path: Path) -> None:
    # what nbconvert writes for a text/html output: the HTML as it is, inside the page
    exported = tmp_path / "notebook.html"
    exported.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                        f"<div class='output_html'>{recording._repr_html_()}</div></body></html>",
                        encoding="utf-8")
    with open_page(browser, exported) as loaded:
        frame = loaded.page.frame_locator("iframe.tgr-frame")
        frame.locator(f"{ROOT}[data-engine=ready]").wait_for(timeout=60_000)
        frame.locator(f"{ROOT} .tgr-fit").click()
        title = frame.locator('[id="c-layer:stem#0"] text').first
        title.dblclick()
        frame.locator(f"{ROOT}[data-layouts='1']").wait_for(timeout=60_000)
        assert frame.locator('[id="n-layer:stem#0"]').count() == 1
    assert loaded.problems == []
    assert all(url.startswith(("file:", "about:")) for url in loaded.requests), loaded.requests


def test_probe_statistics_show_in_the_side_panel(browser, tmp_path: Path) -> None:
    from torchgraphrec import select as S
    from torchgraphrec.recording import backward_loss

    case = fresh("resnet_like")
    with tgr.Recorder(case.model, probes=[tgr.probe("grad_output", where=S.leaves())]) as rec:
        for _ in range(3):
            backward_loss(case.model(*case.args)).backward()
            rec.step()
    path = rec.recording.to_html(tmp_path / "probes.html")
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        element(page, "layer:layers.0.0.conv1#0", "n").click()
        assert "grad_output.rms" in page.text_content(f"{ROOT} .tgr-details")
        assert page.locator(f"{ROOT} .tgr-series .tgr-chart").count() == 1
        assert page.text_content(f"{ROOT} .tgr-series").startswith("grad_output.rms over 3 steps")
        page.select_option(f"{ROOT} .tgr-colour", "grad_output.rms")
        assert page.locator(f"{ROOT} .tgr-canvas .tgr-coloured").count() > 0
    assert loaded.problems == []
