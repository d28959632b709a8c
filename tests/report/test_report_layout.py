"""The report lays out per module (issue 22): each open module's inside on its own, placed in
its parent; opening inside a folded run opens one block; the view never loses the drawing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from llama import gpt2_tiny
from report.reportpage import act, centre, drawn_ids, each_flow, element, loaded_report
from report.walk import in_view, settle, walk

ROOT = "#tgr"


@pytest.fixture(scope="module")
def gpt2_report(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    recording = tgr.record(*gpt2_tiny())
    return recording.render(tmp_path_factory.mktemp("gpt2") / "gpt2.html")


def _fresh_layouts(page: Any) -> int:
    """How many modules the last drawing laid out (the others came from the cache)."""
    return int(page.evaluate(f"() => document.querySelector('{ROOT}').tgr.svg.dataset.layouts"))


_LOOSE_ENDS = """() => {
  const svg = document.querySelector('%s').tgr.svg, root = svg.querySelector('g.graph');
  const ends = (path) => {
    const m = root.getCTM().inverse().multiply(path.getCTM()), n = path.getTotalLength();
    return [path.getPointAtLength(0), path.getPointAtLength(n)].map((p) => p.matrixTransform(m));
  };
  const all = [...svg.querySelectorAll('g.edge path')]
    .map((p) => [p, p.closest('g.edge').id, ...ends(p)]);
  const parts = all.filter(([, id]) => /-(in|out)$/.test(id)), loose = [];
  for (const [path, id, start, end] of parts) {
    const entering = id.endsWith('-in'), at = entering ? start : end;
    const meets = ([other, , s, e]) => {
      const there = entering ? e : s;
      return other !== path && Math.hypot(there.x - at.x, there.y - at.y) < 0.5;
    };
    if (!all.some(meets)) loose.push(id);
  }
  return {parts: parts.length, loose};
}""" % ROOT


def test_an_edge_crossing_a_modules_frame_is_one_line(browser, gpt2_report) -> None:
    # each open module is laid out on its own: the part of an edge inside starts (ends) at a
    # port Graphviz placed there, the part outside ends (starts) where it met the module's box
    with loaded_report(browser, gpt2_report, fit=False) as loaded:
        page = loaded.page
        for opened in ("layer:h.0.attn.c_attn#0", "layer:wte#0"):
            act(page, element(page, opened, "n").dispatch_event, "dblclick")
        found = page.evaluate(_LOOSE_ENDS)
        assert found["parts"] >= 10
        assert found["loose"] == []
        act(page, page.select_option, f"{ROOT} select.tgr-rankdir", "LR")
        found = page.evaluate(_LOOSE_ENDS)
        assert found["parts"] >= 10
        assert found["loose"] == []
    assert loaded.problems == []


_THROUGH_BOXES = """() => {
  const svg = document.querySelector('%s').tgr.svg, root = svg.querySelector('g.graph');
  const inRoot = (element) => root.getCTM().inverse().multiply(element.getCTM());
  const boxes = [...svg.querySelectorAll('g.node[id]')].map((node) => {
    const b = node.getBBox(), m = inRoot(node);
    const a = new DOMPoint(b.x, b.y).matrixTransform(m);
    const c = new DOMPoint(b.x + b.width, b.y + b.height).matrixTransform(m);
    return [node.id.slice(2), a.x + 3, a.y + 3, c.x - 3, c.y - 3];
  });
  const found = [];
  for (const path of svg.querySelectorAll('g.edge path')) {
    const id = path.closest('g.edge').id, m = inRoot(path), n = path.getTotalLength();
    for (const [box, x0, y0, x1, y1] of boxes) {
      if (id.includes(box)) continue;  // its own ends
      let inside = 0;
      for (let s = 0; s <= n; s += 2) {
        const q = path.getPointAtLength(s).matrixTransform(m);
        if (q.x > x0 && q.x < x1 && q.y > y0 && q.y < y1) inside++;
      }
      if (inside > 2) found.push([id, box]);
    }
  }
  return found;
}""" % ROOT


def test_joined_edges_go_round_boxes_and_enter_attention_by_its_corners(browser,
                                                                        tmp_path: Path) -> None:
    # Llama with every leaf open: the rotary embedding's cos and sin enter the attention far
    # above the ops they feed, and q, k and v enter attention by compass points
    pytest.importorskip("transformers")
    from helpers import fresh

    path = tgr.record(*fresh("llama")).render(tmp_path / "llama.html")
    with loaded_report(browser, path, fit=False) as loaded:
        page = loaded.page
        act(page, page.click, f'{ROOT} .tgr-opt[data-opt="leaves"]')
        for flow in each_flow(page):
            found = page.evaluate(_LOOSE_ENDS)
            assert found["parts"] >= 30
            assert found["loose"] == []
            assert page.evaluate(_THROUGH_BOXES) == []
    assert loaded.problems == []


class _Residual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x).relu()


def test_what_one_module_hands_the_next_leaves_it_as_one_line(browser, tmp_path: Path) -> None:
    # the stem's ReLU feeds the block's conv and its sum: one line between the two frames,
    # which splits inside the block, and no second stub leaving the stem (the page's own
    # layout, per module, as after any action)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()),
                                _Residual())
    path = tgr.record(model, torch.randn(1, 3, 8, 8)).render(tmp_path / "residual.html")
    with loaded_report(browser, path, fit=False) as loaded:
        page = loaded.page  # opening the block's conv: the page lays the view out per module
        act(page, element(page, "layer:1.conv#0", "n").dispatch_event, "dblclick")
        found = page.evaluate(_LOOSE_ENDS)
        assert found["parts"] >= 3
        assert found["loose"] == []
    assert loaded.problems == []


def test_an_action_lays_out_only_the_modules_it_changed(browser, gpt2_report) -> None:
    with loaded_report(browser, gpt2_report, fit=False) as loaded:
        page = loaded.page
        c_attn = element(page, "layer:h.0.attn.c_attn#0", "n")
        act(page, c_attn.dblclick)
        # c_attn's inside, and each module around it: attn, the folded h.0–2, the model,
        # the page; nothing beside them (ln_1, mlp, ...) is laid out again
        assert _fresh_layouts(page) == 5
        assert "c-layer:h.0.attn.c_attn#0" in drawn_ids(page, "cluster")
        title = element(page, "layer:h.0.attn.c_attn#0", "c").locator("text").first
        act(page, title.dblclick)  # closed again: a view seen before, from the cache
        assert "n-layer:h.0.attn.c_attn#0" in drawn_ids(page)
        page.click(f"{ROOT} .tgr-fit")  # c_fc is below the canvas's edge
        act(page, element(page, "layer:h.0.mlp.c_fc#0", "n").dblclick)
        # c_fc's inside and the modules around it that it made bigger; c_attn's is kept
        assert 2 <= _fresh_layouts(page) <= 5
    assert loaded.problems == []


def test_opening_inside_a_folded_run_opens_it_in_the_first_block_only(browser,
                                                                     gpt2_report) -> None:
    with loaded_report(browser, gpt2_report, fit=False) as loaded:
        page = loaded.page
        group = page.locator(f'{ROOT} .tgr-canvas [id="g-group:layer:h.0#0"] text').first
        if not group.count():  # a one-call run is drawn as its first call's cluster
            group = element(page, "layer:h.0#0", "c").locator("text").first
        assert group.text_content().endswith("× 3")
        before = drawn_ids(page)
        act(page, element(page, "layer:h.0.attn.c_attn#0", "n").dblclick)
        after = drawn_ids(page)
        # the box became a cluster holding its own ops, once: not in each of the 3 blocks
        assert before - after == {"n-layer:h.0.attn.c_attn#0"}
        added = after - before
        assert added and all(i.startswith("n-op:") for i in added) and len(added) <= 3
        assert group.text_content().endswith("× 3")  # still folded
    assert loaded.problems == []


def test_the_point_under_the_pointer_stays_there(browser, gpt2_report) -> None:
    with loaded_report(browser, gpt2_report, fit=False) as loaded:
        page = loaded.page
        title = element(page, "layer:h.0.attn#0", "c").locator("text").first
        x, y = centre(title)
        act(page, page.mouse.dblclick, x, y)  # a tall cluster closes to a box
        box = element(page, "layer:h.0.attn#0", "n").bounding_box()
        assert box["x"] <= x <= box["x"] + box["width"] and box["y"] <= y <= box["y"] + box["height"]
        act(page, page.mouse.dblclick, x, y)  # and opens again: its title under the pointer
        cluster = element(page, "layer:h.0.attn#0", "c").bounding_box()
        assert cluster["x"] <= x <= cluster["x"] + cluster["width"]
        assert cluster["y"] <= y <= cluster["y"] + 40  # the top of it, not its middle
        assert in_view(page, "c-layer:h.0.attn#0")["target"]
    assert loaded.problems == []


def test_a_random_walk_never_loses_the_drawing(browser, gpt2_report) -> None:
    with loaded_report(browser, gpt2_report, fit=False) as loaded:
        settle(loaded.page)
        done = walk(loaded.page, 200, ["c_proj", "attn", "ln_", "mlp", "add"], seed=22)
    assert len(done.actions) == 200
    assert done.blank == [] and done.lost == []
    assert loaded.problems == []


def test_the_page_draws_attentions_projections_q_k_v(browser, tmp_path: Path) -> None:
    # laid out per module by the page (layout.js), the rules of to_dot hold: the main path
    # enters attention by its query, the projections are one row in role order
    pytest.importorskip("transformers")
    from helpers import fresh

    path = tgr.record(*fresh("llama")).render(tmp_path / "llama.html")
    block = "layer:layers.0.self_attn."
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        act(page, element(page, f"{block}o_proj#0", "n").dblclick)
        assert f"c-{block}o_proj#0" in drawn_ids(page, "cluster")
        x, y = zip(*(centre(element(page, f"{block}{p}_proj#0", "n")) for p in "qkv"))
        assert x[0] < x[1] < x[2]
        assert max(y) - min(y) < 1
        act(page, page.select_option, f"{ROOT} select.tgr-rankdir", "LR")  # q, k, v from the top
        x, y = zip(*(centre(element(page, f"{block}{p}_proj#0", "n")) for p in "qkv"))
        assert y[0] < y[1] < y[2]
        assert max(x) - min(x) < 1


_BOXES_IN_VIEW = """() => {
  const R = document.querySelector('%s').tgr, canvas = R.host.getBoundingClientRect();
  return [...R.svg.querySelectorAll('g.node')].filter((e) => { const r = e.getBoundingClientRect();
    return r.width > 0 && r.right > canvas.left && r.left < canvas.right && r.bottom > canvas.top && r.top < canvas.bottom; }).length;
}""" % ROOT


def test_a_drawing_too_big_to_read_whole_opens_on_the_boxes_the_flow_comes_in_by(
        browser, tmp_path: Path) -> None:
    # T5's encoder and decoder side by side: the middle of the drawing's top is empty
    pytest.importorskip("transformers")
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=4,
                      num_decoder_layers=4, num_heads=4)
    ids = torch.randint(0, 64, (1, 8))
    recording = tgr.record(T5ForConditionalGeneration(config).eval(), (),
                           {"input_ids": ids, "decoder_input_ids": ids})
    with loaded_report(browser, recording.render(tmp_path / "t5.html"), fit=False) as loaded:
        settle(loaded.page)
        assert loaded.page.evaluate(_BOXES_IN_VIEW) > 0
    assert loaded.problems == []


_SCALE_AND_OFFSET = """() => {
  const R = document.querySelector('%s').tgr, canvas = R.host.getBoundingClientRect();
  const drawn = R.svg.querySelector('g.graph').getBoundingClientRect();
  return [tgrScale(R.svg), drawn.left + drawn.width / 2 - (canvas.left + canvas.width / 2),
          drawn.top + drawn.height / 2 - (canvas.top + canvas.height / 2)];
}""" % ROOT


def test_a_small_drawing_opens_at_its_own_size_in_the_middle(browser, tmp_path: Path) -> None:
    # fitted to the canvas, three Linear/ReLU boxes were drawn at 1.4 times their size
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    path = tgr.record(model, torch.randn(3, 8)).render(tmp_path / "mlp.html")
    with loaded_report(browser, path, fit=False) as loaded:
        settle(loaded.page)
        scale, dx, dy = loaded.page.evaluate(_SCALE_AND_OFFSET)
        assert scale == pytest.approx(0.75, abs=0.01)  # Graphviz's points, as browsers show them
        assert abs(dx) < 2 and abs(dy) < 2
        loaded.page.click(f"{ROOT} .tgr-fit")  # all of it, as big as the canvas allows
        assert loaded.page.evaluate(_SCALE_AND_OFFSET)[0] < 0.7
    assert loaded.problems == []


def test_hiding_ops_while_leaves_are_open_draws_the_leaves_as_boxes(browser,
                                                                    tmp_path: Path) -> None:
    # opened to no ops, a leaf was an empty frame Graphviz does not draw: "could not lay
    # this view out: undefined is not iterable", and the ops checkbox seemed dead
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    path = tgr.record(model, torch.randn(3, 8)).render(tmp_path / "mlp.html")
    with loaded_report(browser, path, fit=False) as loaded:
        page = loaded.page
        act(page, page.click, f'{ROOT} .tgr-opt[data-opt="leaves"]')
        assert "c-layer:0#0" in drawn_ids(page, "cluster")
        act(page, page.click, f'{ROOT} .tgr-opt[data-opt="ops"]')
        assert {"n-layer:0#0", "n-layer:1#0", "n-layer:2#0"} <= drawn_ids(page)
        assert page.locator(f"{ROOT} .tgr-status").text_content() == ""
    assert loaded.problems == []


class _Cached(nn.Module):
    """Ten blocks, each adding what it computed in the first forward to what it computes in
    the next (a decode step's KV cache, handed from one forward to the next)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(10))

    def forward(self, x: torch.Tensor, cache: Optional[list] = None) -> tuple:
        made = []
        for index, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[index])
            made.append(x)
        return x, made


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, past: Optional[torch.Tensor]) -> torch.Tensor:
        y = self.fc(x)
        return y if past is None else y + past


_MARKERS = """() => [...document.querySelector('%s').tgr.svg.querySelectorAll('g.tgr-marker')]
  .filter((g) => /-(n-?\\d+|g\\d+)q\\d+$/.test(g.id)).map((g) => g.querySelector('text').textContent)""" % ROOT


def test_many_edges_from_another_forward_enter_by_markers(browser, tmp_path: Path) -> None:
    # all ten ran from one port on the module's frame the module's length, and Graphviz's
    # work grew with those lengths: 13 s to open a module of an 80-layer decode step
    torch.manual_seed(0)
    model = _Cached()
    with torch.no_grad(), tgr.Recorder(model) as recorder:
        _, cache = model(torch.randn(2, 8))
        model(torch.randn(2, 8), cache)
    path = recorder.recording.render(tmp_path / "decode.html")
    with loaded_report(browser, path, fit=False) as loaded:
        page = loaded.page
        act(page, element(page, "layer:blocks.0#1", "c").locator("text").first.dispatch_event,
            "dblclick")  # closed: the page lays out per module
        markers = page.evaluate(_MARKERS)
    # each edge is still drawn: from its source's marker beside where it goes, and leaving
    # its source for a marker naming where it goes (the closed block "0" in the first)
    assert sorted(markers) == ["fc"] * 10 + ["→ 0"] + ["→ add"] * 9
    assert loaded.problems == []
