"""The report's keyboard, in the browser: "/" searches and Escape leaves the search; on the
drawing the arrows pan, + and - zoom about its middle, 0 fits and Enter opens or closes
the selected module as a double-click does; keys typed into the page's fields stay theirs."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from report.reportpage import ROOT, act, drawn_ids, element, loaded_report, state
from report.walk import settle


@pytest.fixture(scope="module")
def nested_report(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(
        block=nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), head=nn.Linear(8, 2)))
    recording = tgr.record(model, torch.randn(2, 8))
    return recording.to_html(tmp_path_factory.mktemp("keys") / "report.html", depth=1)


def _view(page: Any) -> dict[str, Any]:
    return page.evaluate(f"""() => {{
      const R = document.querySelector('{ROOT}').tgr;
      const rect = R.svg.getBoundingClientRect();
      return {{box: tgrBox(R.svg), scale: tgrScale(R.svg), fitted: R.svg.dataset.fitted,
               shown: [rect.width, rect.height],
               focused: document.activeElement === R.host ? 'drawing'
                 : document.activeElement.className}};
    }}""")


def test_the_drawing_pans_zooms_and_fits_from_the_keyboard(browser, nested_report) -> None:
    with loaded_report(browser, nested_report) as loaded:
        page = loaded.page
        page.click(f"{ROOT} .tgr-canvas", position={"x": 5, "y": 5})  # empty canvas: focus
        before = _view(page)
        assert before["focused"] == "drawing"
        page.keyboard.press("ArrowRight")
        after = _view(page)
        # 15 % of the canvas as shown, in drawing units (the viewBox keeps the drawing's
        # aspect, not the canvas's)
        step = 0.15 * before["shown"][0] * before["scale"]
        assert after["box"][0] == pytest.approx(before["box"][0] + step, abs=0.02)
        assert after["box"][1:] == pytest.approx(before["box"][1:], abs=0.02)
        middle = [after["box"][0] + after["box"][2] / 2, after["box"][1] + after["box"][3] / 2]
        page.keyboard.press("+")
        zoomed = _view(page)
        assert zoomed["scale"] == pytest.approx(after["scale"] / 1.25, rel=1e-3)
        assert [zoomed["box"][0] + zoomed["box"][2] / 2,  # about the middle: it stays put
                zoomed["box"][1] + zoomed["box"][3] / 2] == pytest.approx(middle, abs=0.05)
        page.keyboard.press("-")
        assert _view(page)["scale"] == pytest.approx(after["scale"], rel=1e-3)
        page.keyboard.press("0")
        fitted = _view(page)
        assert " ".join(f"{v:g}" for v in fitted["box"]) == \
            " ".join(f"{float(v):g}" for v in fitted["fitted"].split())
    assert loaded.problems == []


def test_enter_opens_and_closes_the_selected_module(browser, nested_report) -> None:
    with loaded_report(browser, nested_report) as loaded:
        page = loaded.page
        assert "n-layer:block#0" in drawn_ids(page)  # closed at depth 1
        element(page, "layer:block#0", "n").click()
        settle(page)
        assert state(page)["selected"] == "layer:block#0"
        act(page, page.keyboard.press, "Enter")
        assert "c-layer:block#0" in drawn_ids(page, "cluster")
        assert {"n-layer:block.0#0", "n-layer:block.2#0"} <= drawn_ids(page)
        act(page, page.keyboard.press, "Enter")
        assert "n-layer:block#0" in drawn_ids(page)
        assert "c-layer:block#0" not in drawn_ids(page, "cluster")
    assert loaded.problems == []


def test_slash_searches_escape_leaves_and_fields_keep_their_keys(browser,
                                                                nested_report) -> None:
    with loaded_report(browser, nested_report) as loaded:
        page = loaded.page
        assert page.get_attribute(ROOT, "data-lm-suppress-shortcuts") == "true"
        page.click(f"{ROOT} .tgr-canvas", position={"x": 5, "y": 5})
        page.keyboard.press("/")
        assert _view(page)["focused"] == "tgr-search"
        box = _view(page)["box"]
        page.keyboard.type("head+0")  # the drawing's keys, typed into the search: text
        assert page.input_value(f"{ROOT} .tgr-search") == "head+0"
        assert _view(page)["box"] == box
        page.keyboard.press("Escape")  # clears the search
        assert page.input_value(f"{ROOT} .tgr-search") == ""
        assert state(page)["count"] == ""
        page.keyboard.press("Escape")  # leaves it for the drawing
        assert _view(page)["focused"] == "drawing"
    assert loaded.problems == []
