"""The report's table and timeline as a reader on a 1,400 px screen sees them: the table fits
without scrolling sideways whatever the names and outputs, and timeline bars wide enough
for a name carry it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from llama import gpt2_tiny
from report.reportpage import loaded_report

ROOT = "#tgr"


class _Many(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.proj(x)
        return tuple(y * i for i in range(8))


class _LongNames(nn.Module):
    """Names as long as a reader meets and a call with eight outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.a_rather_long_module_name_for_a_block = nn.ModuleDict(
            {"another_long_inner_name": nn.ModuleDict({"yet_another_level_of_nesting": _Many()})})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = self.a_rather_long_module_name_for_a_block["another_long_inner_name"]
        return sum(inner["yet_another_level_of_nesting"](x))


@pytest.fixture(scope="module")
def gpt2_report(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    case = gpt2_tiny()
    recording = tgr.record(case.model, *case.args, backward=True, flops=True, memory=True)
    return recording.render(tmp_path_factory.mktemp("gpt2") / "report.html")


def _widths(page) -> list[int]:
    return page.evaluate(f"""() => {{ const w = document.querySelector('{ROOT} .tgr-table-wrap');
        return [w.scrollWidth, w.clientWidth, document.documentElement.scrollWidth]; }}""")


@pytest.mark.needs("saved_bytes")
def test_the_table_fits_1400_px_whatever_the_names(browser, gpt2_report, tmp_path: Path) -> None:
    long = tgr.record(_LongNames(), torch.randn(3, 5, 7, 8), backward=True, flops=True,
                      memory=True)
    for path in (gpt2_report, long.render(tmp_path / "long.html")):
        with loaded_report(browser, path, width=1400) as loaded:
            page = loaded.page
            scroll, client, document = _widths(page)
            assert scroll <= client and document <= 1400, path
            shot = tmp_path / f"table-{path.stem}.png"
            page.locator(f"{ROOT} .tgr-table-wrap").screenshot(path=shot)
            if path.stem == "long":  # the whole name on hover, its end in the cell
                cell = page.locator(f"{ROOT} .tgr-calls tbody td", has_text="nesting.proj").first
                assert cell.get_attribute("title").startswith("a_rather_long_module_name")
                assert cell.text_content().startswith("…")
        assert loaded.problems == []


def test_timeline_bars_are_labelled_where_wide_enough(browser, gpt2_report) -> None:
    with loaded_report(browser, gpt2_report, width=1400) as loaded:
        page = loaded.page
        page.select_option(f"{ROOT} .tgr-colour", "flops")
        labels = page.evaluate(f"""() => Array.from(document.querySelectorAll(
            '{ROOT} .tgr-timeline text.tgr-bar-label')).map(t => {{
              const bar = t.previousElementSibling, box = t.getBBox();
              return [t.textContent, bar.dataset.node, box.x, box.x + box.width,
                      +bar.getAttribute('x'), +bar.getAttribute('x') + +bar.getAttribute('width')]; }})""")
        names = {text.split(": ")[0] for text, *_ in labels}  # "h.0: GPT2Block": see below
        assert {"(model)", "h.0", "h.1", "h.2"} <= names
        for text, node, left, right, bar_left, bar_right in labels:  # inside its own bar
            assert bar_left <= left and right <= bar_right, text
        ids = page.evaluate(f"document.querySelector('{ROOT}').tgr.D.ids")
        info = page.evaluate(f"document.querySelector('{ROOT}').tgr.info")
        for text, node, *_ in labels:  # the call's name, or its last part (a number: typed)
            name, short = info[int(node)].get("qualname") or "(model)", text.split(": ")[0]
            assert short in (name, name.split(".")[-1]), ids[int(node)]
            typed = f"{short}: {info[int(node)]['type']}"
            assert text == short or (short[-1].isdigit() and text == typed)
        # a bar too narrow for its name carries none
        narrow = page.evaluate(f"""() => Array.from(document.querySelectorAll(
            '{ROOT} .tgr-timeline rect')).filter(r => +r.getAttribute('width') < 8).length""")
        assert narrow == 0 or len(labels) < page.locator(f"{ROOT} .tgr-timeline rect").count()
        # the label lets clicks through to its bar
        assert page.evaluate(f"""getComputedStyle(document.querySelector(
            '{ROOT} .tgr-timeline text.tgr-bar-label')).pointerEvents""") == "none"
    assert loaded.problems == []


def test_a_numbered_calls_bar_says_its_type(browser, tmp_path: Path) -> None:
    # a Sequential's children are named 0, 1, 2: their bars read "0: Linear" where that fits;
    # the Linears are made to dominate the forward, so that their bars are wide whatever the
    # machine (a bar needs about a twentieth of the span for "0: Linear")
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512), nn.Tanh())
    path = tgr.record(model, torch.randn(256, 512)).render(tmp_path / "mlp.html")
    with loaded_report(browser, path, width=1400) as loaded:
        labels = loaded.page.locator(
            f"{ROOT} .tgr-timeline text.tgr-bar-label").all_text_contents()
    calls = [text for text in labels if text[0].isdigit()]  # a bar too narrow keeps "1"
    assert any(re.fullmatch(r"\d: Linear", text) for text in calls)
    assert all(re.fullmatch(r"\d(: (Linear|ReLU|Tanh))?", text) for text in calls)
    assert loaded.problems == []
