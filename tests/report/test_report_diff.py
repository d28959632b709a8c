"""A diff's report: its header counts what the text summary counts; either side alone is
drawn as that side's own recording would be (folded as it folds)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import torchgraphrec as tgr
from report.reportpage import act, drawn_ids, element, loaded_report, state
from torchgraphrec.render.dot import to_dot
from torchgraphrec.report.html import to_html

ROOT = "#tgr"


def _gpt2(layers: int) -> tgr.Recording:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=64, n_head=2, vocab_size=100,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(config).eval()
    return tgr.record(model, torch.randint(0, 100, (1, 8)))


@pytest.fixture(scope="module")
def gpt2_diff() -> tgr.GraphDiff:
    return tgr.diff(_gpt2(2), _gpt2(3))


@pytest.fixture(scope="module")
def diff_report(gpt2_diff, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("diff") / "diff.html"
    path.write_text(to_html(gpt2_diff.union), encoding="utf-8")
    return path


def test_the_header_counts_what_the_summary_counts(browser, gpt2_diff, diff_report) -> None:
    headline = gpt2_diff.summary().splitlines()[0]
    with loaded_report(browser, diff_report, width=1400) as loaded:
        parts = loaded.page.locator(f"{ROOT} .tgr-diff-facts > span").all_text_contents()
    # the summary's headline, part for part (the parameter total is in the facts above)
    assert parts == [p for p in headline.split("; ") if not p.startswith("parameters")]
    assert [part.split()[0] for part in parts[:3]] == ["calls", "ops", "param"]
    assert loaded.problems == []


def test_side_b_is_drawn_as_b_folds_it(browser, gpt2_diff, diff_report,
                                       tmp_path: Path) -> None:
    b = gpt2_diff.b
    with loaded_report(browser, diff_report, width=1400) as loaded:
        page = loaded.page
        both = state(page)["dot"]
        assert "h.0–1: GPT2Block  × 2" in both  # the union keeps the added block apart
        act(page, page.select_option, f"{ROOT} .tgr-side", "b")
        page.click(f"{ROOT} .tgr-fit")
        page.screenshot(path=tmp_path / "diff-side-b.png")
        drawn = state(page)["dot"]
        assert "h.0–2: GPT2Block  × 3" in drawn
        assert drawn == to_dot(b)  # exactly B's own static drawing
        act(page, page.select_option, f"{ROOT} .tgr-side", "a")
        side_a = state(page)["dot"]
        assert "h.0–1: GPT2Block  × 2" in side_a
        # A's own drawing, but for the ids (the union names what both have as B does)
        unnamed = lambda dot: re.sub(r' id="[^"]*"', "", dot)  # noqa: E731
        assert unnamed(side_a) == unnamed(to_dot(gpt2_diff.a))
        act(page, page.select_option, f"{ROOT} .tgr-side", "b")  # back: its runs again
        run = page.evaluate(f"""() => {{ const R = document.querySelector('{ROOT}').tgr;
            return R.P.D.runs.findIndex((r) => r.calls.length === 3); }}""")
        title = page.locator(f'{ROOT} .tgr-canvas [id="c-layer:h.0#0"] text').first
        title.click()  # the side panel offers the three repeats, and they unfold
        show = page.locator(f"{ROOT} .tgr-actions button", has_text="Show the 3 repeats")
        act(page, show.click)
        assert page.evaluate(f"[...document.querySelector('{ROOT}').tgr.state.unfolded]") == [run]
        assert {"n-layer:h.0#0", "n-layer:h.1#0", "n-layer:h.2#0"} <= drawn_ids(page)  # each closed
    assert loaded.problems == []


def test_the_table_says_how_each_call_differs(browser, tmp_path: Path) -> None:
    # the union's rows carried side b's numbers alone, and nothing said which calls differ
    torch.manual_seed(0)
    old = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    new = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4),
                              torch.nn.Dropout())
    x = torch.randn(3, 8)
    found = tgr.diff(tgr.record(old, x), tgr.record(new, x))
    path = found.render(tmp_path / "diff.html")
    with loaded_report(browser, path, width=1400) as loaded:
        heads = loaded.page.locator(f"{ROOT} .tgr-calls thead th").all_text_contents()
        rows = [row.locator("td").all_text_contents()
                for row in loaded.page.locator(f"{ROOT} .tgr-calls tbody tr").all()]
    table = {row[0].strip(): dict(zip(heads, row)) for row in rows}
    assert heads[:3] == ["module", "diff", "type"]
    assert {name: row["diff"] for name, row in table.items()} == {
        "(model)": "changed", "0": "changed", "1": "changed", "2": "changed", "3": "added"}
    assert table["0"]["params"] == "144 → 288"
    assert table["1"]["type"] == "ReLU → GELU"
    assert table["3"]["params"] == "0"
    assert loaded.problems == []


def test_a_changed_calls_details_speak_of_shapes_not_tensor_ids(browser, tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    old = tgr.record(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                         torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                         torch.nn.Linear(16, 2)), x)
    new = tgr.record(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(),
                                         torch.nn.Linear(32, 2)), x)
    found = tgr.diff(old, new)
    # the union keeps each side's tensors of a call whose shapes changed (side A draws its own)
    assert "inputs" in found.union.nodes["layer:2#0"]["diff_changes"]
    with loaded_report(browser, found.render(tmp_path / "diff.html")) as loaded:
        page = loaded.page
        element(page, "layer:2#0", "n").click()
        rows = dict(zip(page.locator(f"{ROOT} .tgr-row > span:first-child").all_text_contents(),
                        page.locator(f"{ROOT} .tgr-row > span:last-child").all_text_contents()))
    assert rows["compared"] == "changed"
    assert "tensor:" not in " ".join(rows.values())
    assert loaded.problems == []


def test_a_changed_calls_own_parameters_read_old_to_new(browser, tmp_path: Path) -> None:
    # "its own" listed side B's shapes alone, with nothing saying they changed
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    old = tgr.record(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()), x)
    new = tgr.record(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU()), x)
    with loaded_report(browser, tgr.diff(old, new).render(tmp_path / "diff.html")) as loaded:
        element(loaded.page, "layer:0#0", "n").click()
        rows = dict(zip(
            loaded.page.locator(f"{ROOT} .tgr-row > span:first-child").all_text_contents(),
            loaded.page.locator(f"{ROOT} .tgr-row > span:last-child").all_text_contents()))
    assert rows["its own"] == "weight 16×8 → 32×8, bias 16 → 32"
    assert rows["parameters"] == "144 → 288"
    assert loaded.problems == []


class _Tied(torch.nn.Module):
    """A head that reads the embedding's weight, of ``words`` rows."""

    def __init__(self, words: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(words, 4)
        self.head = torch.nn.Linear(4, words, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def test_a_weight_read_of_another_module_reads_old_to_new(browser, tmp_path: Path) -> None:
    ids = torch.tensor([[1, 2]])
    found = tgr.diff(tgr.record(_Tied(10), ids), tgr.record(_Tied(12), ids))
    with loaded_report(browser, found.render(tmp_path / "diff.html")) as loaded:
        element(loaded.page, "layer:head#0", "n").click()
        rows = dict(zip(
            loaded.page.locator(f"{ROOT} .tgr-row > span:first-child").all_text_contents(),
            loaded.page.locator(f"{ROOT} .tgr-row > span:last-child").all_text_contents()))
    assert rows["also reads"] == "embed.weight 10×4 → 12×4"
    assert loaded.problems == []
