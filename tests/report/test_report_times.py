"""The report's times are the graph's: the header, the table's bars, the timeline and the
colours show ``forward_ms``, ``self_ms``, ``backward_ms`` and ``t_start_ns``/``t_end_ns``
as recorded (the recorder's own work left out by its clock), and nothing else."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import torchgraphrec as tgr
from models import resnet50_like
from report.reportpage import loaded_report
from torchgraphrec.report.pagedata import facts

ROOT = "#tgr"


@pytest.fixture(scope="module")
def resnet50() -> tgr.Recording:
    case = resnet50_like()
    model = case.model.eval()
    with torch.no_grad():
        model(*case.args)  # warm up, as the recording's own forward is not the first
        started = time.perf_counter()
        model(*case.args)
        plain = (time.perf_counter() - started) * 1e3
        recording = tgr.record(model, *case.args)
    root = _root(recording)
    print(f"\nResNet-50 forward: {plain:.1f} ms plain, {root['forward_ms']:.1f} ms in the graph")
    return recording


def _root(recording: tgr.Recording) -> dict:
    return next(a for _, a in recording.graph.nodes(data=True)
                if a["kind"] == "layer" and a["parent"] is None)


def test_the_header_shows_the_root_calls_forward_ms(resnet50, tmp_path: Path) -> None:
    assert facts(resnet50.graph)["forward_ms"] == _root(resnet50)["forward_ms"]
    page = resnet50.to_html(tmp_path / "r.html").read_text(encoding="utf-8")
    assert f'data-ms="{_root(resnet50)["forward_ms"]}"' in page
    assert "overhead" not in page.lower() and "(recorded)" not in page


def test_a_graph_without_costs_shows_its_times_as_recorded() -> None:
    recording = tgr.record(torch.nn.Linear(2, 2), torch.ones(1, 2))
    graph = recording.graph.copy()
    root = next(n for n, a in graph.nodes(data=True) if a["kind"] == "layer")
    del graph.nodes[root]["forward_ms"]
    attrs = graph.nodes[root]
    assert facts(graph)["forward_ms"] == (attrs["t_end_ns"] - attrs["t_start_ns"]) / 1e6


def test_table_timeline_and_colours_show_the_graphs_times(browser, resnet50,
                                                          tmp_path: Path) -> None:
    graph = resnet50.graph
    order = None
    path = resnet50.render(tmp_path / "report.html")
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        order = page.evaluate(f"document.querySelector('{ROOT}').tgr.D.ids")
        header = page.locator(f"{ROOT} .tgr-forward-time")
        print(f"header: {header.text_content()}")
        assert float(header.get_attribute("data-ms")) == _root(resnet50)["forward_ms"]
        heads = page.locator(f"{ROOT} .tgr-calls th").all_text_contents()
        assert {"forward", "self"} <= set(heads)
        assert not any("recorded" in h for h in heads)
        for key, head in (("forward_ms", "forward"), ("self_ms", "self")):
            column = heads.index(head) + 1
            rows = page.eval_on_selector_all(
                f"{ROOT} .tgr-calls tbody tr",
                f"rows => rows.map(r => [Number(r.dataset.node),"
                f" Number(r.children[{column - 1}].dataset.value)])")
            assert {order[i]: v for i, v in rows} == {
                n: a[key] for n, a in graph.nodes(data=True) if a["kind"] == "layer"}
        # the timeline: each bar spans its call's t_start_ns..t_end_ns on one scale
        bars = page.eval_on_selector_all(
            f"{ROOT} .tgr-timeline rect.tgr-forward",
            "rects => rects.map(r => [Number(r.dataset.node), +r.getAttribute('width')])")
        root = _root(resnet50)
        span = root["t_end_ns"] - root["t_start_ns"]
        for i, width in bars:
            a = graph.nodes[order[i]]
            assert width == pytest.approx(max(0.5, 1000 * (a["t_end_ns"] - a["t_start_ns"]) / span),
                                          abs=0.01)
        caption = page.locator(f"{ROOT} .tgr-timeline-forward text").first.text_content()
        assert caption.startswith("forward: ") and "recorded" not in caption
        # colouring by time reads the same numbers: the most costly call has the top colour
        page.select_option(f"{ROOT} .tgr-colour", "self_ms")
        values = page.evaluate(f"""() => {{ const R = document.querySelector('{ROOT}').tgr;
            return R.D.ids.map((_, i) => tgrValue(R, i)); }}""")
        for i, value in enumerate(values):
            if value is not None:
                assert value == graph.nodes[order[i]]["self_ms"]
        text = page.locator(ROOT).inner_text().lower()
        assert "overhead" not in text and "(recorded)" not in text
        page.screenshot(path=tmp_path / "report-times.png", full_page=True)
    assert loaded.problems == []


def test_the_timeline_draws_a_bar_per_backward_pass(browser, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    with tgr.Recorder(model) as recorder:
        out = model(torch.randn(4, 8))
        out.pow(2).sum().backward(retain_graph=True)
        time.sleep(0.02)  # the user's own work between the passes: no call's backward
        out.sum().backward()
    recording = recorder.recording
    graph = recording.graph
    path = recording.render(tmp_path / "report.html")
    with loaded_report(browser, path) as loaded:
        page = loaded.page
        order = page.evaluate(f"document.querySelector('{ROOT}').tgr.D.ids")
        bars = page.eval_on_selector_all(
            f"{ROOT} .tgr-timeline rect.tgr-backward",
            "rects => rects.map(r => [Number(r.dataset.node), +r.getAttribute('x'),"
            " +r.getAttribute('width')])")
        titles = page.eval_on_selector_all(f"{ROOT} .tgr-timeline rect.tgr-backward title",
                                           "titles => titles.map(t => t.textContent)")
        assert not loaded.problems
    # each bar says its own pass's time, beside the call's over all passes
    assert sum("pass 1 of 2: " in title for title in titles) == 4
    assert sum("pass 2 of 2: " in title for title in titles) == 4
    root = _root(recording)
    start = root["t_backward_start_ns"]
    span = root["t_backward_end_ns"] - start
    expected = sorted(
        (order.index(node), 1000 * (first - start) / span, max(0.5, 1000 * (last - first) / span))
        for node, attrs in graph.nodes(data=True) if attrs["kind"] == "layer"
        for first, last in zip(attrs["t_backward_spans_ns"][::2],
                               attrs["t_backward_spans_ns"][1::2]))
    assert len(expected) == 2 * 4  # each call, in each pass
    assert [i for i, _, _ in sorted(bars)] == [i for i, _, _ in expected]
    for drawn, wanted in zip(sorted(bars), expected):  # drawn to two decimals
        assert drawn == pytest.approx(wanted, abs=0.006)
