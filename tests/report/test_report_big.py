"""Big models in the report: Llama-3-70B's shape on the meta device and GPT-2 small, in a
real browser: a size a reader can live with, and a reader's first actions each drawn (their
times are measured by ``benchmarks/render.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import torchgraphrec as tgr
from llama import LLAMA_3_70B, llama_meta
from report.reportpage import act, big_model_actions, loaded_report, measure, state

#: A report's most bytes.
MAX_BYTES = 8_000_000


def gpt2_small_meta() -> tuple:
    """GPT-2 small from its default config (12 blocks, 124M parameters), random weights on
    the meta device: no download, no memory."""
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.GPT2Model(transformers.GPT2Config(bos_token_id=0,
                                                               eos_token_id=0)).eval()
    return model, (torch.zeros(1, 16, dtype=torch.long, device="meta"),)


@pytest.fixture(scope="module")
def llama_report(tmp_path_factory) -> Path:
    case = llama_meta()
    assert LLAMA_3_70B["layers"] == 80
    with torch.no_grad():
        recording = tgr.record(*case)
    return recording.render(tmp_path_factory.mktemp("llama") / "llama.html")


def test_llama_3_70b_shaped(browser, llama_report: Path) -> None:
    assert llama_report.stat().st_size < MAX_BYTES
    times = measure(browser, llama_report,
                    big_model_actions("layer:layers.0#0", "layer:layers.40#0"))
    assert times["paint"] is not None and times["ready"] is not None, times
    actions = {k: v for k, v in times.items() if k not in ("paint", "ready", "engine")}
    assert len(actions) == 4, times  # each one drawn


def test_a_view_too_big_to_lay_out_quickly_is_asked_for_first(browser, llama_report) -> None:
    with loaded_report(browser, llama_report) as loaded:
        page = loaded.page
        act(page, page.click, "#tgr .tgr-layout-ops")  # every op, layout ops included
        before = state(page)["dot"]
        page.click('#tgr .tgr-opt[data-opt="fold"]')  # all 80 blocks, every op: thousands
        ask = page.locator("#tgr .tgr-ask")
        ask.wait_for(state="visible")
        assert re.match(r"This view has [\d,]+ boxes and ops", ask.text_content().strip())
        page.click("#tgr .tgr-ask-no")
        assert ask.is_hidden() and state(page)["dot"] == before
        assert page.locator('#tgr .tgr-opt[data-opt="fold"]').is_checked()
    assert loaded.problems == []


def test_gpt2_small(browser, tmp_path: Path) -> None:
    recording = tgr.record(*gpt2_small_meta())
    path = recording.render(tmp_path / "gpt2.html")
    times = measure(browser, path, big_model_actions("layer:h.0#0", "layer:h.5#0"))
    assert times["paint"] is not None and times["ready"] is not None, times
    actions = {k: v for k, v in times.items() if k not in ("paint", "ready", "engine")}
    assert len(actions) == 4, times  # each one drawn
