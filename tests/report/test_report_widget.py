"""The notebook display as a widget: its engine loaded once per page, a saved notebook that
stays small, an SVG for renderers without JavaScript, and ``show()`` outside a notebook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torchgraphrec as tgr
from torchgraphrec import jupyter
from torchgraphrec.report.html import engine_script

ROOT_JS = Path(tgr.__file__).parent / "report" / "templates" / "widget.js"


@pytest.fixture(scope="module")
def recording() -> tgr.Recording:
    return tgr.record(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                          torch.nn.Linear(8, 2)), torch.randn(2, 4))


def test_outside_a_kernel_the_bundle_is_the_frame(recording) -> None:
    assert not jupyter.in_notebook()
    assert set(recording._repr_mimebundle_()) == {"text/plain", "text/html", "image/svg+xml"}


def test_in_a_kernel_the_bundle_is_a_widget_with_an_svg(recording, monkeypatch) -> None:
    pytest.importorskip("anywidget")
    monkeypatch.setattr(jupyter, "in_notebook", lambda: True)
    bundle = recording._repr_mimebundle_()
    assert set(bundle) == {"text/plain", jupyter.WIDGET_MIME, "image/svg+xml"}
    assert bundle["image/svg+xml"].lstrip().startswith("<?xml")
    assert len(json.dumps(bundle[jupyter.WIDGET_MIME])) < 200
    widget = jupyter._widget_class()(recording.graph)
    assert len(widget._esm) < 5_000  # the engine is not in the widget's state
    sent = []
    widget.send = lambda content, buffers=None: sent.append((content, buffers[0].decode()))
    widget._answer(widget, {"ask": "engine"}, [])
    widget._answer(widget, {"ask": "report"}, [])
    widget._answer(widget, {"ask": "nothing"}, [])
    (engine, script), (report, fragment) = sent
    assert engine == {"answer": "engine"} and script == engine_script()
    assert report == {"answer": "report"} and "tgr-viz" not in fragment
    assert "<script>" not in fragment and f'id="tgr-{widget.model_id[:12]}"' in fragment


def test_show_outside_a_notebook_opens_the_browser(recording, monkeypatch, capsys) -> None:
    opened = []
    monkeypatch.setattr(jupyter.webbrowser, "open", opened.append)
    path = recording.show(depth=1)
    assert opened == [path.as_uri()]
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out == ""  # nothing printed


def _notebook(cells: list[str]) -> object:
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return notebook


def test_a_saved_notebook_with_ten_reports_stays_small(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("anywidget")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import os  # the kernel imports the torchgraphrec under test, wherever it is installed
    source = str(Path(tgr.__file__).parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])))
    setup = ("import torch, torchgraphrec as tgr\n"
             "def make(width):\n"
             "    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(),\n"
             "                                torch.nn.Linear(width, 2))\n"
             "    return tgr.record(model, torch.randn(2, 4))")
    notebook = _notebook([setup] + [f"make({8 + k})" for k in range(10)])
    path = tmp_path / "ten.ipynb"
    nbformat.write(notebook, path)
    before = path.stat().st_size
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(notebook, path)
    grown = path.stat().st_size - before
    print(f"\nten displayed recordings: the notebook grew by {grown / 1e3:.0f} kB")
    assert grown < 1_000_000
    shown = [o["data"] for cell in notebook.cells[1:] for o in cell.outputs
             if o.output_type == "execute_result"]
    assert len(shown) == 10
    for data in shown:  # the widget, and an SVG for renderers without JavaScript
        assert {jupyter.WIDGET_MIME, "image/svg+xml", "text/plain"} <= set(data)
        assert "text/html" not in data
    state = json.dumps(notebook.metadata.get("widgets", {}))
    assert engine_script()[1000:1100] not in state and len(state) < 100_000  # no engine in it


def test_the_widget_loads_its_engine_once_and_draws_each_report(browser, recording,
                                                               tmp_path: Path) -> None:
    """Three widgets on one page, each asking a stand-in for the kernel: one engine load,
    three reports drawn, each laid out in the page again on a double-click."""
    widget = jupyter._widget_class()
    if widget is None:
        pytest.skip("anywidget is not installed")
    from report.browser import open_page

    fragments = []
    for k in range(3):
        made = widget(recording.graph)
        sent = []
        made.send = lambda content, buffers=None, sent=sent: sent.append(buffers[0].decode())
        made._answer(made, {"ask": "report"}, [])
        fragments.append(sent[0])
    module = ROOT_JS.read_text(encoding="utf-8").replace("export default {render};",
                                                         "globalThis.tgrWidget = {render};")
    page_path = tmp_path / "host.html"
    page_path.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                         "<div id='w0'></div><div id='w1'></div><div id='w2'></div></body></html>",
                         encoding="utf-8")
    with open_page(browser, page_path) as loaded:
        page = loaded.page
        page.add_script_tag(content=module)
        page.evaluate("""([engine, fragments]) => {
            globalThis.asked = [];
            fragments.forEach((fragment, k) => {
              const handlers = [];
              const model = {get: () => "Sequential", on: (_, f) => handlers.push(f),
                off: (_, f) => handlers.splice(handlers.indexOf(f), 1),
                send: (message) => { asked.push(message.ask); setTimeout(() => {
                  const text = message.ask === "engine" ? engine : fragment;
                  for (const f of handlers.slice()) f({answer: message.ask}, [new TextEncoder().encode(text).buffer]);
                }, 10); }};
              tgrWidget.render({model, el: document.getElementById("w" + k)});
            });
        }""", [engine_script(), fragments])
        for k in range(3):
            page.wait_for_selector(f"#w{k} .tgr-report[data-ready][data-engine=ready]",
                                   timeout=60_000)
        assert page.evaluate("globalThis.__tgrEngineLoads") == 1
        assert sorted(page.evaluate("asked")) == ["engine"] + ["report"] * 3
        assert page.locator(".tgr-report .tgr-canvas svg").count() == 3
        page.locator('#w1 [id="c-layer:#0"] text').first.dblclick()  # closes in the page
        page.wait_for_selector("#w1 .tgr-report[data-layouts='1']", timeout=60_000)
        assert page.locator('#w1 [id="n-layer:#0"]').count() == 1
        assert page.locator('#w0 [id="c-layer:#0"]').count() == 1  # the others as they were
        page.screenshot(path=tmp_path / "widgets.png", full_page=True)
    assert loaded.problems == []
