"""What the page draws for a module stays inside the module's frame, as the page lays it out
(per module, layout.js): however tall or wide the module, and wherever Graphviz routes an edge
inside it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from llama import gpt2_tiny
from report.reportpage import ROOT, act, each_flow, element, loaded_report

# shared by the checks below: an element's box, or a point, in the drawing's own units
_IN_ROOT = """
  const R = document.querySelector('%s').tgr, svg = R.svg, root = svg.querySelector('g.graph');
  const toRoot = (e) => root.getCTM().inverse().multiply(e.getCTM());
  const boxOf = (e) => {
    const b = e.getBBox(), m = toRoot(e);
    const a = new DOMPoint(b.x, b.y).matrixTransform(m), c = new DOMPoint(b.x + b.width, b.y + b.height).matrixTransform(m);
    return [Math.min(a.x, c.x), Math.min(a.y, c.y), Math.max(a.x, c.x), Math.max(a.y, c.y)];
  };
  const frameOf = (cluster) => boxOf(cluster.querySelector('path, polygon'));
  const past = (q, f) => Math.max(f[0] - q[0], q[0] - f[2], f[1] - q[1], q[1] - f[3], 0);
""" % ROOT

_NODES_OUTSIDE_THEIR_FRAMES = """() => {%s
  const {D} = R.P, placed = R.drawn.placed, out = [];
  const elementOf = (c) => typeof c === 'string'
    ? svg.querySelector(`[id="g-group:${CSS.escape(D.xid[D.runs[+c.slice(1)].calls[0]])}"]`)
    : svg.querySelector(`[id="c-${CSS.escape(D.xid[c])}"]`);
  for (const node of svg.querySelectorAll('g.node[id^="n-"]')) {
    const b = boxOf(node);
    for (let c = placed.parentOf.get(R.byXid.get(node.id.slice(2))); c !== undefined && c !== -1; c = placed.parentOf.get(c)) {
      const f = frameOf(elementOf(c)), worst = Math.max(past([b[0], b[1]], f), past([b[2], b[3]], f));
      if (worst > 1) out.push([node.id, elementOf(c).id, Math.round(worst)]);
    }
  }
  const frames = [...svg.querySelectorAll('g.cluster')].map(frameOf);
  const tallest = Math.max(...frames.map((f) => Math.max(f[2] - f[0], f[3] - f[1])));
  const view = svg.dataset.fitted.split(' ').map(Number), drawn = boxOf(root);
  return {out, tallest, nodes: svg.querySelectorAll('g.node').length, status: R.$('.tgr-status').textContent,
          view: [view[2], view[3]], drawn: [drawn[2] - drawn[0], drawn[3] - drawn[1]]};
}""" % _IN_ROOT

_EDGES_OUTSIDE_FRAMES = """() => {%s
  const frames = [...svg.querySelectorAll('g.cluster')].map((c) => [c.id, frameOf(c)]), out = [];
  let edges = 0;
  for (const path of svg.querySelectorAll('g.edge path')) {
    const m = toRoot(path), n = path.getTotalLength(), points = [];
    for (let s = 0; s < n; s += 2) points.push(path.getPointAtLength(s));
    points.push(path.getPointAtLength(n));
    const at = points.map((p) => { const q = p.matrixTransform(m); return [q.x, q.y]; });
    edges++;
    // every frame around both its ends holds all of it: the innermost one, and those around it
    for (const [id, f] of frames) {
      if (past(at[0], f) > 1 || past(at[at.length - 1], f) > 1) continue;
      const worst = Math.max(...at.map((q) => past(q, f)));
      if (worst > 1) out.push([path.closest('g.edge').id, id, Math.round(worst)]);
    }
  }
  return {edges, out};
}""" % _IN_ROOT


class _Deep(nn.Module):
    """An MLP of 520 Linear/ReLU pairs in one Sequential: unfolded, the Sequential lays out
    about 69,500 pt long, past the 65,535 a Graphviz table cell allows."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(520) for m in (nn.Linear(4, 4), nn.ReLU())])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@pytest.fixture(scope="module")
def deep() -> Any:
    torch.manual_seed(0)
    return tgr.record(_Deep(), torch.randn(3, 4))


@pytest.mark.parametrize("rankdir", ["TB", "LR"])
def test_a_module_longer_than_a_graphviz_cell_keeps_its_boxes_in_its_frame(
        browser, deep, rankdir: str, tmp_path: Path) -> None:
    # its box in its parent was a cell Graphviz refused ("HEIGHT value 69494 > 65535 - too
    # large - ignored"): the model's frame was 189 pt tall around a body 69,494 pt tall
    path = deep.render(tmp_path / "deep.html", depth=1, fold_repeats=False, rankdir=rankdir)
    with loaded_report(browser, path, fit=False) as loaded:
        page = loaded.page  # the body opened: the page lays the view out, per module
        act(page, element(page, "layer:body#0", "n").dispatch_event, "dblclick")
        found = page.evaluate(_NODES_OUTSIDE_THEIR_FRAMES)
    assert found["tallest"] > 65_535
    assert found["nodes"] > 1_000
    assert found["out"] == []
    # the drawing is as big as what it holds: nothing hangs out of its box
    assert found["view"] == pytest.approx(found["drawn"], abs=2)
    assert found["status"] == ""
    assert loaded.problems == []


def test_a_box_graphviz_lays_out_at_another_size_says_why_and_keeps_the_drawing(
        browser, deep, tmp_path: Path) -> None:
    # were a module's box still one cell too long (as before: tgrPieces made to give one
    # piece), the engine's warnings reach the status line and the reader keeps the drawing
    path = deep.render(tmp_path / "deep.html", depth=1, fold_repeats=False)
    with loaded_report(browser, path, fit=False) as loaded:
        page = loaded.page
        before = page.evaluate(f"document.querySelector('{ROOT}').tgr.drawn.dot")
        page.evaluate("tgrPieces = (n) => [n]")
        element(page, "layer:body#0", "n").dispatch_event("dblclick")
        status = page.locator(f"{ROOT} .tgr-status")
        page.wait_for_function(f"""document.querySelector('{ROOT} .tgr-status')
                                   .textContent.startsWith('could not')""", timeout=30_000)
        text = status.text_content()
        assert "Graphviz laid out a module of 98 × 69,494 pt as" in text
        assert re.search(r"\(HEIGHT value 694\d\d > 65535 - too large - ignored; ", text)
        assert page.evaluate(f"document.querySelector('{ROOT}').tgr.drawn.dot") == before
        message = page.evaluate("""async () => {
          try { tgrLaidOut(await window.__tgrViz, 'digraph { a -> }', false); return null; }
          catch (error) { return error.message; } }""")
        assert message == "Graphviz: syntax error in line 1 near '}'"
    assert loaded.problems == []


@pytest.fixture(scope="module")
def gpt2_report(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    recording = tgr.record(*gpt2_tiny())
    return recording.render(tmp_path_factory.mktemp("gpt2") / "gpt2.html")


def test_gpt2s_residual_stays_inside_the_block_it_runs_in(browser, gpt2_report) -> None:
    # with tensors, Graphviz routed the residual from drop to the first add round the
    # attention, 28 to 44 pt outside the block's, the transformer's and the model's frames
    with loaded_report(browser, gpt2_report, fit=False) as loaded:
        page = loaded.page
        act(page, page.click, f'{ROOT} .tgr-opt[data-opt="tensors"]')
        for flow in each_flow(page):
            found = page.evaluate(_EDGES_OUTSIDE_FRAMES)
            assert found["edges"] > 40
            assert found["out"] == [], flow
    assert loaded.problems == []


class _UNet(nn.Module):
    """Two levels down, one up, skips joined by cat: the skips run beside the levels below."""

    def __init__(self) -> None:
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.down2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.mid = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.up2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.dec2 = nn.Sequential(nn.Conv2d(32, 8, 3, padding=1), nn.ReLU())
        self.up1 = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.dec1 = nn.Conv2d(16, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        m = self.mid(self.pool(d2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], 1))
        return self.dec1(torch.cat([self.up1(u2), d1], 1))


def test_a_unets_edges_stay_inside_the_frames_around_their_ends(browser, tmp_path: Path) -> None:
    torch.manual_seed(0)
    path = tgr.record(_UNet(), torch.randn(1, 3, 16, 16)).render(tmp_path / "unet.html")
    with loaded_report(browser, path, fit=False) as loaded:
        page = loaded.page
        act(page, page.click, f'{ROOT} .tgr-opt[data-opt="leaves"]')
        for option in ("tensors", "params"):
            act(page, page.click, f'{ROOT} .tgr-opt[data-opt="{option}"]')
            found = page.evaluate(_EDGES_OUTSIDE_FRAMES)
            assert found["edges"] > 20
            assert found["out"] == [], option
    assert loaded.problems == []
