"""The report's finer behaviour, measured in the browser: a diff's side shown alone acts only
on what it has, its timeline is one run's, its details say ``old → new`` in the rows they
change; a question about a big view never outlives the view; the params box says when it
draws nothing; colouring keeps the drawing still and the wheel zoom stays in bounds."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from models import ReusedModule, mlp
from report.browser import open_page
from report.reportpage import ROOT, act, drawn_ids, element, loaded_report, state
from report.walk import in_view, settle


def _net(*layers: tuple[str, nn.Module]) -> nn.Sequential:
    return nn.Sequential(OrderedDict(layers))


@pytest.fixture(scope="module")
def diff_report(tmp_path_factory) -> Path:
    """B drops A's last two calls, narrows ``fc1`` and adds a block ``extra`` with calls in it
    (neither side has repeats to fold)."""
    torch.manual_seed(0)
    x = torch.randn(2, 16)
    old = _net(("fc0", nn.Linear(16, 16)), ("act0", nn.ReLU()), ("fc1", nn.Linear(16, 8)),
               ("act1", nn.ReLU()), ("fc2", nn.Linear(8, 2)))
    new = _net(("fc0", nn.Linear(16, 16)), ("act0", nn.ReLU()), ("fc1", nn.Linear(16, 2)),
               ("extra", nn.Sequential(nn.Linear(2, 2), nn.ReLU())))
    found = tgr.diff(tgr.record(old, x), tgr.record(new, x))
    assert {"layer:act1#0", "layer:fc2#0"} <= set(found.removed)
    return found.render(tmp_path_factory.mktemp("diff") / "diff.html")


@pytest.fixture(scope="module")
def mlp_recording() -> tgr.Recording:
    torch.manual_seed(0)
    return tgr.record(*mlp()[:2])


def _page(page: Any, script: str, *args: Any) -> Any:
    """``script``, a function of the report's state ``R`` (and ``args``), run in the page."""
    return page.evaluate(f"([args]) => (({script}))(document.querySelector('{ROOT}').tgr, ...args)",
                         [list(args)])


def _rows(page: Any) -> list[tuple[str, str]]:
    names = page.locator(f"{ROOT} .tgr-row > span:first-child").all_text_contents()
    return list(zip(names, page.locator(f"{ROOT} .tgr-row > span:last-child").all_text_contents()))


def _actions(page: Any) -> list[str]:
    return page.locator(f"{ROOT} .tgr-actions button").all_text_contents()


def test_a_side_shown_alone_finds_selects_and_offers_only_what_it_has(browser,
                                                                     diff_report) -> None:
    with loaded_report(browser, diff_report) as loaded:
        page = loaded.page
        element(page, "layer:extra#0").first.locator("text").first.click()
        settle(page)
        assert _actions(page) == ["Close"]  # both sides drawn: the added block is there
        act(page, page.select_option, f"{ROOT} .tgr-side", "a")
        # still selected, but A has no such block: nothing to open, nothing drawn to open
        assert _actions(page) == []
        assert "show both sides" in page.text_content(f"{ROOT} .tgr-actions")
        page.click(f"{ROOT} .tgr-fit")
        element(page, "layer:fc0#0", "n").click()
        settle(page)
        search = page.locator(f"{ROOT} .tgr-search")
        search.fill("extra")  # extra, extra.0, extra.1: all added in B
        assert state(page)["count"] == "0 matches · 3 only in side B"
        search.press("Enter")
        settle(page)
        assert state(page)["selected"] == "layer:fc0#0"
        row = page.locator(f"{ROOT} .tgr-calls tbody tr", has_text="extra.0")
        assert "tgr-absent" in row.get_attribute("class")
        row.click()
        settle(page)
        assert state(page)["selected"] == "layer:fc0#0"  # the row selects nothing A lacks
        search.fill("fc")
        assert state(page)["count"].startswith("3 matches · 3 drawn")  # A's fc0, fc1, fc2
        act(page, page.select_option, f"{ROOT} .tgr-side", "b")
        assert state(page)["count"].startswith("2 matches · 2 drawn")
        assert state(page)["count"].endswith(" · 1 only in side A")
        assert "tgr-absent" not in row.get_attribute("class")
    assert loaded.problems == []


def test_a_diffs_timeline_is_side_bs_run_alone(browser, diff_report) -> None:
    with loaded_report(browser, diff_report) as loaded:
        page = loaded.page
        bars = _page(page, """(R) => [...R.root.querySelectorAll('.tgr-timeline-forward rect')].map((r) =>
            [R.D.ids[+r.dataset.node], +r.getAttribute('x'), +r.getAttribute('width')])""")
        model = _page(page, """(R) => { const a = R.info[R.byId.get('layer:#0')];
            return tgrFormat('forward_ms', (a.t_end_ns - a.t_start_ns) / 1e6); }""")
        caption = page.text_content(f"{ROOT} .tgr-timeline-forward text")
        note = page.text_content(f"{ROOT} .tgr-timeline-note")
    spans = {node: (x, x + width) for node, x, width in bars}
    # A's calls ran on another clock: none of them is drawn on B's axis
    assert not {"layer:act1#0", "layer:fc2#0"} & set(spans)
    assert {"layer:fc0#0", "layer:extra#0", "layer:extra.0#0"} <= set(spans)
    assert spans["layer:#0"] == (0, 1000)  # the model's call spans the whole axis
    assert caption == f"side B, forward: {model}"
    assert note.startswith("Side B's run (new); the 2 calls only side A made are left out")
    assert loaded.problems == []


def test_a_changed_nodes_details_say_old_to_new_in_the_rows_they_change(browser,
                                                                       diff_report) -> None:
    with loaded_report(browser, diff_report) as loaded:
        page = loaded.page
        element(page, "layer:fc1#0", "n").click()
        settle(page)
        call = _rows(page)
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="leaves"]').click)
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="params"]').click)
        element(page, "param:fc1.weight", "n").click()
        settle(page)
        weight = _rows(page)
    names = [name for name, _ in call]
    assert len(names) == len(set(names)), names  # each row once
    rows = dict(call)
    assert rows["settings"] == "out_features=8 → 2"  # as the drawing writes it
    assert rows["parameters"] == "136 → 34"
    assert rows["outputs"] == "2×8 → 2×2"
    assert rows["compared"] == "changed"
    assert not {"num_params", "output_shapes"} & set(names)
    assert not any(mark in value for _, value in call for mark in '"[')  # no JSON
    assert [row for row in weight if row[0] == "shape"] == [("shape", "8×16 → 2×16")]
    assert loaded.problems == []


def test_a_newer_relayout_answers_a_pending_question(browser, mlp_recording, tmp_path: Path,
                                                     monkeypatch) -> None:
    # its leaves open: 5 boxes and ops, 9 with the parameters: "big" here
    monkeypatch.setattr("torchgraphrec.report.html.BIG_DRAWING", 8)
    path = mlp_recording.to_html(tmp_path / "report.html")
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="leaves"]').click)
        params = page.locator(f'{ROOT} .tgr-opt[data-opt="params"]')
        ask = page.locator(f"{ROOT} .tgr-ask")
        params.click()
        ask.wait_for(state="visible")
        before = drawn_ids(page)
        act(page, params.click)  # undone before answering: the small view again
        assert ask.is_hidden()
        assert _page(page, "(R) => R.inFlight") == 0  # the question's re-layout ended too
        assert drawn_ids(page) == before and not params.is_checked()
        params.click()
        ask.wait_for(state="visible")
        act(page, page.locator(f"{ROOT} .tgr-ask-yes").click)
        assert _page(page, "(R) => R.inFlight") == 0
        assert "n-param:0.weight" in drawn_ids(page) and params.is_checked()
    assert loaded.problems == []


def test_the_params_box_says_when_it_draws_nothing(browser, mlp_recording,
                                                   tmp_path: Path) -> None:
    # every parameter is a leaf's: drawn only inside a leaf opened to its ops
    assert mlp_recording.to_dot(include_params=True) == mlp_recording.to_dot()
    path = mlp_recording.to_html(tmp_path / "report.html")
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        params = page.locator(f'{ROOT} .tgr-opt[data-opt="params"]')
        label = page.locator(f'{ROOT} label:has(.tgr-opt[data-opt="params"])')
        assert "tgr-idle" in label.get_attribute("class")
        assert "inside leaves" in label.get_attribute("title")
        act(page, params.click)  # still usable: search finds parameters while it is ticked
        assert not {i for i in drawn_ids(page) if i.startswith("n-param:")}
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="leaves"]').click)
        assert "tgr-idle" not in label.get_attribute("class")
        assert {"n-param:0.weight", "n-param:2.bias"} <= drawn_ids(page)
    assert loaded.problems == []


def test_colouring_keeps_the_drawing_still_and_the_wheel_zoom_is_bounded(
        browser, mlp_recording, tmp_path: Path) -> None:
    path = mlp_recording.to_html(tmp_path / "report.html")
    canvas_top = "() => document.querySelector('#tgr .tgr-canvas').getBoundingClientRect().top"
    with loaded_report(browser, path, width=1280) as loaded:
        page = loaded.page
        top = page.evaluate(canvas_top)
        page.select_option(f"{ROOT} .tgr-colour", index=1)
        assert page.locator(f"{ROOT} .tgr-legend").is_visible()
        assert page.evaluate(canvas_top) == top  # the legend's slot was kept for it
        page.screenshot(path=tmp_path / "coloured.png")
        box = page.locator(f"{ROOT} .tgr-canvas").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        fitted = _page(page, """(R) => { const [, , w, h] = R.svg.dataset.fitted.split(' ').map(Number),
            r = R.svg.getBoundingClientRect(); return Math.max(w / r.width, h / r.height); }""")
        for _ in range(150):
            page.mouse.wheel(0, 120)
        page.wait_for_timeout(100)
        farthest = _page(page, "(R) => tgrScale(R.svg)")
        assert farthest <= max(fitted, 0.75) * 4 + 1e-6
        assert in_view(page)["seen"] == in_view(page)["drawn"]  # all of it, small but there
        for _ in range(150):
            page.mouse.wheel(0, -120)
        page.wait_for_timeout(100)
        assert _page(page, "(R) => tgrScale(R.svg)") >= 0.75 / 16 - 1e-6
        assert in_view(page)["seen"] > 0
    assert loaded.problems == []


def test_a_view_the_engine_cannot_lay_out_leaves_the_controls_as_drawn(
        browser, mlp_recording, tmp_path: Path) -> None:
    # the state went back to the drawn view but the controls kept the new choice: the next
    # action then drew what the controls did not show
    path = mlp_recording.to_html(tmp_path / "report.html")
    flow = f"{ROOT} .tgr-rankdir"
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        drawn = state(page)["dot"]
        page.evaluate("() => { window.__kept = tgrLayOut; "
                      "tgrLayOut = () => { throw new Error('no room'); }; }")
        page.select_option(flow, "LR")
        page.wait_for_function(f"""document.querySelector('{ROOT} .tgr-status')
                                   .textContent.startsWith('could not')""", timeout=30_000)
        assert page.text_content(f"{ROOT} .tgr-status") == "could not lay this view out: no room"
        assert page.input_value(flow) == "TB"
        assert _page(page, "(R) => R.state.rankdir") == "TB"
        assert state(page)["dot"] == drawn
        page.evaluate("() => { tgrLayOut = window.__kept; }")
        act(page, page.select_option, flow, "LR")  # the engine back: the same choice draws
        assert page.input_value(flow) == "LR"
        assert "rankdir=LR" in state(page)["dot"]
        assert page.text_content(f"{ROOT} .tgr-status") == ""
    assert loaded.problems == []


def test_an_option_that_changes_nothing_here_says_why(browser, mlp_recording,
                                                      tmp_path: Path) -> None:
    # a Sequential's boxes carry their inputs' and outputs' shapes: ticking tensors drew
    # the same view, with no word of why
    assert mlp_recording.to_dot(include_tensors=True) == mlp_recording.to_dot()
    path = mlp_recording.to_html(tmp_path / "report.html")
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        drawn = state(page)["dot"]
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="tensors"]').click)
        page.wait_for_function(f"document.querySelector('{ROOT} .tgr-status').textContent !== ''")
        status = page.locator(f"{ROOT} .tgr-status")
        assert status.text_content() == "tensors: none to add here"
        assert "on its label" in status.get_attribute("title")
        assert state(page)["dot"] == drawn
        act(page, page.locator(f'{ROOT} .tgr-opt[data-opt="leaves"]').click)  # this one draws
        assert state(page)["dot"] != drawn
        assert page.text_content(f"{ROOT} .tgr-status") == ""
    assert loaded.problems == []


def test_a_flow_and_a_weight_from_one_module_enter_a_second_call_as_two_lines(
        browser, tmp_path: Path) -> None:
    """The page's own layout gave both one port: the flow was drawn as a dashed weight."""
    torch.manual_seed(0)
    rec = tgr.record(ReusedModule(), torch.randn(2, 5))  # shared(tanh(shared(shared(x))))
    second = next(n for n, a in rec.graph.nodes(data=True)
                  if a["kind"] == "op" and a["parent"] == "layer:shared#1")
    flow = [s for s in rec.graph.predecessors(second)
            if rec.graph.edges[s, second]["kind"] == "flow"]
    assert flow == list(rec.graph.nodes["layer:shared#0"]["outputs"])  # the first call's output
    path = rec.to_html(tmp_path / "reused.html")
    with loaded_report(browser, path, "#d=all&f=01111&r=TB&v=both") as loaded:
        page = loaded.page
        settle(page)
        parts = _page(page, """(R, edge) => [...document.querySelectorAll('#tgr .tgr-canvas g.edge')]
            .filter((g) => g.id.startsWith(edge)).map((g) => [g.id,
              !!g.querySelector('path').getAttribute('stroke-dasharray'),
              g.querySelectorAll('polygon').length])""", f"e-{flow[0]}--{second}")
    assert parts, "the flow into the second call is not drawn"
    assert all(not dashed for _, dashed, _ in parts), parts  # a flow, not a weight
    assert any(arrows for name, _, arrows in parts if name.endswith("-in"))  # its arrowhead
    assert loaded.problems == []


def test_two_fragments_on_one_page_both_start(browser, mlp_recording, tmp_path: Path) -> None:
    from torchgraphrec.report.html import report_fragment

    path = tmp_path / "two.html"
    path.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                    + report_fragment(mlp_recording.graph, element_id="one")
                    + report_fragment(mlp_recording.graph, element_id="two")
                    + "</body></html>", encoding="utf-8")
    with open_page(browser, path) as loaded:
        for root in ("#one", "#two"):
            loaded.page.wait_for_selector(f"{root}[data-ready][data-engine=ready]",
                                          timeout=60_000)
    assert loaded.problems == []


def test_parameter_counts_read_as_the_drawing_writes_them(browser, mlp_recording,
                                                          tmp_path: Path) -> None:
    from torchgraphrec.text.units import count_text

    path = mlp_recording.to_html(tmp_path / "mlp.html")
    with loaded_report(browser, path) as loaded:
        for count in (950, 12_345, 2_000_360_008, 70_553_706_496):
            said = loaded.page.evaluate("(n) => tgrFormat('num_params', n)", count)
            assert f"{said} params" == count_text(count)  # 2B params, not 2G


def test_a_side_alone_tables_outputs_say_old_to_new(browser, diff_report) -> None:
    with loaded_report(browser, diff_report) as loaded:
        page = loaded.page
        act(page, page.select_option, f"{ROOT} .tgr-side", "a")
        row = page.locator(f"{ROOT} .tgr-calls tbody tr", has_text="fc1").first
        cells = row.locator("td").all_text_contents()
    assert "2×8 → 2×2" in cells  # A's output, then B's, as the params column writes them
    assert loaded.problems == []


def test_a_modules_statistics_on_one_of_its_calls_say_they_are_all_its_calls(
        browser, tmp_path: Path) -> None:
    from torchgraphrec import select as S

    torch.manual_seed(0)
    model = nn.Sequential(ReusedModule(), nn.Tanh())  # a Linear called three times a forward
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.leaves(), keep="rms")]) as rec:
        for _ in range(2):
            model(torch.randn(2, 5)).sum().backward()
            rec.step()
    path = rec.recording.to_html(tmp_path / "reused_probes.html", depth=1)
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        texts = []
        for node in ("layer:0.shared#4", "layer:1#1"):  # the second step's
            index = _page(page, f"(R) => R.D.ids.indexOf('{node}')")
            page.click(f'{ROOT} .tgr-calls tbody tr[data-node="{index}"]')
            settle(page)
            assert state(page)["selected"] == node
            texts.append(page.text_content(f"{ROOT} .tgr-series"))
    # each step's point is the mean over that step's three calls of the Linear (the Tanh,
    # called once a forward, says nothing more)
    assert texts[0] == "output.rms over 2 steps: " + texts[0].split(": ")[1].split("the")[0] \
        + "the module's 3 calls a forward taken together"
    assert "calls" not in texts[1] and texts[1].startswith("output.rms over 2 steps")
    assert loaded.problems == []
