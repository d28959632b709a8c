"""The HTML report: self-contained, escaped, and working in a real browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import fresh
from render.browser import open_page
from render.layout import layout
from torchgraphrec.render.html import report_fragment, to_html


@pytest.fixture(scope="module")
def recording() -> tgr.Recording:
    return tgr.record(*fresh("resnet_like"), backward=True)


def _data(html: str) -> dict:
    text = re.search(r'<script type="application/json" class="tgr-data">(.*?)</script>', html,
                     re.S).group(1)
    return json.loads(text)


def test_report_is_one_self_contained_file(recording, tmp_path: Path) -> None:
    path = recording.render(tmp_path / "report.html")
    html = path.read_text(encoding="utf-8")
    assert not re.search(r"https?://", html)
    assert "<script src" not in html and "<link" not in html
    assert html.count("<svg") == 4  # all levels, depths 0, 1 and 2
    data = _data(html)
    assert set(data["nodes"]) == set(recording.graph.nodes)
    assert len(data["layers"]) == 38 and data["layers"][0]["qualname"] == "(root)"


def test_everything_inserted_is_escaped(tmp_path: Path) -> None:
    model = nn.Sequential()
    model.add_module("</script><b>", nn.Linear(2, 2))
    hostile = type("</script><i>", (nn.ReLU,), {})
    model.add_module("a&b", hostile())
    html = to_html(tgr.record(model, torch.randn(1, 2)).graph)
    assert "</script><b>" not in html and "<b>" not in html and "<i>" not in html
    assert html.count("</script>") == 2  # the data and the page's own script, nothing else
    data = _data(html)
    assert "layer:</script><b>#0" in data["nodes"]


def test_fragments_keep_their_own_ids(recording) -> None:
    first = report_fragment(recording.graph, element_id="one")
    second = report_fragment(recording.graph, element_id="two")
    assert 'id="one"' in first and 'getElementById("one")' in first
    assert 'id="two"' in second


def test_jupyter_bundle(recording) -> None:
    bundle = recording._repr_mimebundle_()
    assert bundle["text/plain"] == "<Recording model=ResNetLike layers=38 ops=44 tensors=36 params=56>"
    assert bundle["image/svg+xml"].lstrip().startswith("<?xml")
    assert 'class="tgr-report"' in bundle["text/html"]
    assert set(recording._repr_mimebundle_(include=["text/plain"])) == {"text/plain"}


def test_jupyter_caps_large_output(recording, monkeypatch) -> None:
    from torchgraphrec import jupyter

    monkeypatch.setattr(jupyter, "MAX_BYTES", 1000)
    bundle = recording._repr_mimebundle_()
    assert "image/svg+xml" not in bundle
    assert "cap is 0 MB" in bundle["text/html"] and "rec.show(depth=2)" in bundle["text/html"]


def _expected_hits(recording, query: str, **options) -> int:
    drawing = layout(recording.to_dot(**options))
    data_ids = {}
    for node, attrs in recording.graph.nodes(data=True):
        fields = [node, attrs.get("label"), attrs.get("qualname"), attrs.get("type"),
                  attrs.get("name")]
        data_ids[node] = any(query in str(f).lower() for f in fields if f is not None)
    hits = 0
    for obj in drawing["objects"]:
        if "nodes" in obj and not obj["name"].startswith("cluster_"):
            continue  # a rank=same subgraph, which repeats its cluster's id
        node = obj["id"][2:]
        hits += bool(data_ids.get(node))
    return hits


def test_report_works_in_a_real_browser(browser, recording, tmp_path: Path) -> None:
    # the op-level drawing with parameters, so that ops and parameters can be clicked
    path = recording.render(tmp_path / "report.html", expand_leaves=True, include_params=True)
    with open_page(browser, path) as loaded:
        page = loaded.page
        page.fill("#tgr .tgr-search", "conv")
        shown = page.locator("#tgr .tgr-view:not([hidden]) .tgr-hit").count()
        assert shown == _expected_hits(recording, "conv", expand_leaves=True,
                                       include_params=True) > 0
        assert page.text_content("#tgr .tgr-count").startswith(f"{shown} matches in this view")

        page.click('#tgr [id="n-param:stem.0.weight"]')
        assert page.text_content("#tgr .tgr-details-title") == "stem.0.weight"
        assert "(16, 3, 3, 3)" not in page.text_content("#tgr .tgr-details")
        assert "[16,3,3,3]" in page.text_content("#tgr .tgr-details")

        page.select_option("#tgr .tgr-depth", "2")
        assert page.locator("#tgr .tgr-view").nth(0).is_hidden()
        assert page.locator("#tgr .tgr-view").nth(2).is_visible()
        page.click('#tgr .tgr-view:not([hidden]) [id="n-layer:stem#0"]')
        assert page.text_content("#tgr .tgr-details-title") == "stem"

        page.click('#tgr .tgr-calls th[data-key="params"]')
        params = [int(t.replace(",", "")) for t in
                  page.locator("#tgr .tgr-calls tbody tr td:nth-child(4)").all_text_contents()]
        assert params == sorted(params) and params[0] < params[-1]
        page.click('#tgr .tgr-calls th[data-key="params"]')
        again = [int(t.replace(",", "")) for t in
                 page.locator("#tgr .tgr-calls tbody tr td:nth-child(4)").all_text_contents()]
        assert again == sorted(params, reverse=True)

        page.select_option("#tgr .tgr-depth", "0")
        svg = page.locator("#tgr .tgr-view:not([hidden]) svg")
        before = svg.get_attribute("viewBox")
        box = svg.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.wheel(0, -400)
        assert svg.get_attribute("viewBox") != before
        page.click("#tgr .tgr-fit")
        assert svg.get_attribute("viewBox") == before

        inner = page.locator('#tgr .tgr-view:not([hidden]) [id="n-op:conv2d#0"]')
        assert inner.is_visible()
        page.dblclick('#tgr .tgr-view:not([hidden]) [id="c-layer:stem#0"] text')
        assert inner.is_hidden()
        page.dblclick('#tgr .tgr-view:not([hidden]) [id="c-layer:stem#0"] text')
        assert inner.is_visible()

        assert page.locator("#tgr .tgr-timeline rect.tgr-backward").count() == 38
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert loaded.problems == []
    assert all(url.startswith("file:") for url in loaded.requests), loaded.requests
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_probe_statistics_show_in_the_side_panel(browser, tmp_path: Path) -> None:
    from torchgraphrec import select as S
    from torchgraphrec.recording import backward_loss

    case = fresh("resnet_like")
    with tgr.Recorder(case.model, probes=[tgr.probe("grad_output", where=S.leaves())]) as rec:
        for _ in range(3):
            backward_loss(case.model(*case.args)).backward()
            rec.step()
    path = rec.recording.to_html(tmp_path / "probes.html")
    with open_page(browser, path) as loaded:
        page = loaded.page
        page.click('#tgr .tgr-view:not([hidden]) [id="n-layer:layers.0.0.conv1#0"]')
        assert "grad_output.rms" in page.text_content("#tgr .tgr-details")
        assert page.locator("#tgr .tgr-series .tgr-chart").count() == 1
        assert page.text_content("#tgr .tgr-series").startswith("grad_output.rms over 3 steps")
    assert loaded.problems == []


def test_notebook_display_never_imports_ipython() -> None:
    import subprocess
    import sys

    script = ("import sys, torch, torchgraphrec as tgr; "
              "r = tgr.record(torch.nn.Linear(2, 2), torch.ones(1, 2)); "
              "bundle = r._repr_mimebundle_(); "
              "assert set(bundle) == {'text/plain', 'text/html', 'image/svg+xml'}; "
              "assert 'IPython' not in sys.modules, 'IPython was imported'")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_show_displays_with_the_given_options(recording) -> None:
    from unittest import mock

    ipython_display = pytest.importorskip("IPython.display")
    with mock.patch.object(ipython_display, "display") as shown:
        recording.show(depth=0, include_tensors=False)
    (bundle,), options = shown.call_args
    assert options == {"raw": True}
    assert set(bundle) == {"text/plain", "text/html", "image/svg+xml"}
    svg = bundle["image/svg+xml"].replace("&#45;", "-")  # Graphviz escapes '-' in attributes
    assert 'id="n-layer:#0"' in svg  # depth 0: the root drawn as one box
    assert svg.count("tgr-tensor") == 2  # the model's input and output only
