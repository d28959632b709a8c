"""The HTML report: self-contained, escaped, deterministic, and its page's data."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import fresh
from torchgraphrec.report.describe import opening_depth
from torchgraphrec.report.html import SCRIPTS, report_fragment, to_html
from torchgraphrec.report.pagedata import facts
from torchgraphrec.render.options import RenderOptions


@pytest.fixture(scope="module")
def recording() -> tgr.Recording:
    return tgr.record(*fresh("resnet_like"), backward=True, flops=True, memory=True)


def script_json(page: str, name: str) -> object:
    text = re.search(rf'<script type="application/json" class="{name}">(.*?)</script>', page,
                     re.S).group(1)
    return json.loads(text)


def test_report_is_one_self_contained_file(recording, tmp_path: Path) -> None:
    path = recording.render(tmp_path / "report.html")
    page = path.read_text(encoding="utf-8")
    assert "<script src" not in page and "<link" not in page
    # viz-js's licence header names its project's pages; nothing else links anywhere
    outside_viz = re.sub(r'<script type="text/plain" class="tgr-viz">.*?</script>', "", page,
                         flags=re.S)
    assert not re.search(r"https?://", outside_viz)
    # the opening drawing; every other is laid out by the page
    assert outside_viz.count("<svg") == 1
    drawing = script_json(page, "tgr-drawing")
    assert set(drawing["ids"]) == set(recording.graph.nodes)
    info = script_json(page, "tgr-data")
    assert len(info) == len(drawing["ids"])
    assert info[drawing["ids"].index("layer:stem.0#0")]["_settings"] == "3→16, 3×3, pad 1, no bias"


def test_the_page_opens_at_the_static_drawings_depth() -> None:
    # GPT-2 (two blocks) draws at full depth; the deep MLP's "auto" depth is shallower
    for name in ("gpt2", "resnet_like"):
        graph = tgr.record(*fresh(name)).graph
        page = to_html(graph)
        config = script_json(page, "tgr-config")
        assert config["preset"]["depth"] == opening_depth(graph, RenderOptions())
    graph = tgr.record(*fresh("resnet_like")).graph
    config = script_json(to_html(graph, depth=1, include_tensors=True, rankdir="LR"),
                         "tgr-config")
    assert config["preset"] == {"depth": 1, "tensors": True, "params": False, "ops": True,
                                "leaves": False, "fold": True, "rankdir": "LR", "side": "both"}


def test_everything_inserted_is_escaped() -> None:
    model = nn.Sequential()
    model.add_module("</script><b>", nn.Linear(2, 2))
    hostile = type("</script><i>", (nn.ReLU,), {})
    model.add_module("a&b", hostile())
    page = to_html(tgr.record(model, torch.randn(1, 2)).graph)
    assert "</script><b>" not in page and "<b>" not in page and "<i>" not in page
    # the drawing, the data, the options, viz-js and the page's own script: nothing else
    assert page.count("</script>") == 5
    assert "layer:</script><b>#0" in script_json(page, "tgr-drawing")["ids"]


def test_the_report_is_deterministic(recording) -> None:
    assert to_html(recording.graph) == to_html(recording.graph)


def test_fragments_keep_their_own_ids(recording) -> None:
    first = report_fragment(recording.graph, element_id="one")
    second = report_fragment(recording.graph, element_id="two")
    assert 'id="one"' in first and 'getElementById("one")' in first
    assert 'id="two"' in second


def test_every_script_is_inlined(recording) -> None:
    page = to_html(recording.graph)
    for name in SCRIPTS:
        first_function = re.search(r"^function (\w+)", (Path(tgr.__file__).parent / "report"
                                   / "templates" / name).read_text(), re.M).group(1)
        assert f"function {first_function}(" in page, name


def test_times_say_what_they_are(recording) -> None:
    page = to_html(recording.graph)
    assert re.search(r"<span[^>]*>forward [\d.]+ (ms|µs|ns|s)</span>", page)
    assert "recording included" not in page and "recorder's own work is included" not in page
    assert "plain forward" not in page  # none was measured
    graph = recording.graph.copy()
    graph.graph["plain_forward_ms"] = 1.25
    timed = to_html(graph)
    assert "plain forward 1.2 ms" in timed  # as the table writes times
    assert script_json(timed, "tgr-config")["plain_ms"] == 1.25


@pytest.mark.needs("saved_bytes")
def test_costs_are_in_the_header(recording) -> None:
    page = to_html(recording.graph)
    assert "5.2 MFLOPs forward, 9.9 MFLOPs backward" in page
    assert "222 kB saved for backward" in page


def test_jupyter_bundle(recording) -> None:
    bundle = recording._repr_mimebundle_()
    assert bundle["text/plain"] == ("<Recording model=ResNetLike layers=38 ops=44 tensors=36 "
                                    "params=56>")
    assert bundle["image/svg+xml"].lstrip().startswith("<?xml")
    frame = bundle["text/html"]
    assert frame.startswith('<iframe class="tgr-frame"') and frame == recording._repr_html_()
    srcdoc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    assert html.unescape(srcdoc) == to_html(recording.graph)  # the same page, whole
    assert set(recording._repr_mimebundle_(include=["text/plain"])) == {"text/plain"}


def test_jupyter_caps_large_output(recording, monkeypatch) -> None:
    from torchgraphrec import jupyter

    monkeypatch.setattr(jupyter, "MAX_BYTES", 1000)
    bundle = recording._repr_mimebundle_()
    assert "image/svg+xml" not in bundle
    assert "cap is 0 MB" in bundle["text/html"] and "rec.to_html(" in bundle["text/html"]


def test_the_notebook_cap_holds_for_what_is_embedded(recording, monkeypatch) -> None:
    from torchgraphrec import jupyter

    frame = recording._repr_html_().encode("utf-8")
    page = to_html(recording.graph).encode("utf-8")
    assert len(frame) > len(page)  # escaped for srcdoc, the page grows
    monkeypatch.setattr(jupyter, "MAX_BYTES", len(page))  # the page fits, its frame does not
    shown = recording._repr_html_()
    assert len(shown.encode("utf-8")) <= jupyter.MAX_BYTES
    assert f"would embed {len(frame) / 1e6:.1f} MB" in shown  # the frame's size, not the page's


def test_the_cap_message_advises_what_shows_the_report(recording, monkeypatch,
                                                      tmp_path: Path) -> None:
    from torchgraphrec import jupyter

    whole = to_html(recording.graph)
    monkeypatch.setattr(jupyter, "MAX_BYTES", len(whole) // 2)
    message = recording._repr_html_()
    assert message.startswith("<p>")
    # a shallower report holds the same whole recording (only its opening drawing is
    # smaller), so the message must not offer one
    for depth in (0, 1):
        page = to_html(recording.graph, depth=depth)
        for name in ("tgr-drawing", "tgr-data"):
            assert script_json(page, name) == script_json(whole, name)
    assert "depth" not in message.replace("at any depth", "")
    # what it does advise writes the whole report to a file
    advice = re.search(r"<code>(rec\.to_html\('([^']+)'\))</code>", message)
    monkeypatch.chdir(tmp_path)
    eval(html.unescape(advice.group(1)), {"rec": recording})
    assert (tmp_path / advice.group(2)).read_text("utf-8") == to_html(recording.graph)


def test_a_diff_report_carries_both_sides() -> None:
    torch.manual_seed(0)
    old = tgr.record(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(2, 4))
    new = tgr.record(nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.Linear(16, 2)),
                     torch.randn(2, 4))
    union = tgr.diff(old, new).union
    page = to_html(union)
    drawing, config = script_json(page, "tgr-drawing"), script_json(page, "tgr-config")
    assert config["diff"] is True
    status = dict(zip(drawing["ids"], drawing["status"]))
    assert status["layer:1#0"] == "changed" and status["op:gelu#1"] == "added"
    assert status["op:relu#1"] == "removed"
    # both: the DOT writer's marks; side A drawn plain with A's labels, side B with B's
    first = drawing["ids"].index("layer:0#0")
    assert "out_features=8 → 16" in drawing["own"][first]  # old → new
    assert drawing["mark"]["box"][first] == "changed"
    side_a, side_b = drawing["sides"]["a"]["own"][first], drawing["sides"]["b"]["own"][first]
    assert "4→8" in side_a and "40 params" in side_a and "4→16" not in side_a
    assert "4→16" in side_b and "4→8" not in side_b
    assert "ReLU" in drawing["sides"]["a"]["own"][drawing["ids"].index("layer:1#0")]


class _Unsharding(nn.Module):
    """Runs FSDP2's unshard op as FSDP does when a unit's forward starts, on buffers it makes
    itself: recorded, an unshard the drawing folds into one ``all_gather`` box (no ranks)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shard, gathered = torch.zeros(6), torch.empty(12)
        torch.ops.fsdp.all_gather_copy_in([shard], gathered, [6], 6, 0)
        return self.fc(x)


@pytest.mark.needs("fully_shard")
@pytest.mark.needs("copy_in_given_its_output")
@pytest.mark.parametrize("include_ops", [True, "all"])
def test_fsdp_unshard_boxes_have_their_details(include_ops, tmp_path: Path) -> None:
    import torch.distributed.fsdp  # noqa: F401  registers torch.ops.fsdp

    recording = tgr.record(_Unsharding(), torch.ones(1, 2))
    union = tgr.diff(recording, tgr.record(_Unsharding(), torch.ones(1, 2))).union
    for graph in (recording.graph, union):
        page = to_html(graph, include_ops=include_ops)
        drawing, info = script_json(page, "tgr-drawing"), script_json(page, "tgr-data")
        box = drawing["ids"].index("unshard:op:all_gather_copy_in#2")
        assert len(info) == len(drawing["ids"])
        assert info[box]["name"] == "all_gather" and "FSDP unshard: 3 ops" in info[box]["args"]
    page = recording.render(tmp_path / "unshard.html", include_ops=include_ops).read_text("utf-8")
    assert "unshard:op:all_gather_copy_in#2" in script_json(page, "tgr-drawing")["ids"]


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


def test_show_displays_with_the_given_options(recording, monkeypatch) -> None:
    from unittest import mock

    from torchgraphrec import jupyter

    pytest.importorskip("anywidget")
    ipython_display = pytest.importorskip("IPython.display")
    monkeypatch.setattr(jupyter, "in_notebook", lambda: True)
    made = []
    monkeypatch.setattr(jupyter, "report_widget", lambda graph, **options: made.append(
        jupyter._widget_class()(graph, **options)) or made[-1])
    with mock.patch.object(ipython_display, "display") as shown:
        recording.show(depth=0, include_tensors=False)
    (bundle,), options = shown.call_args
    assert options == {"raw": True}
    assert set(bundle) == {"text/plain", jupyter.WIDGET_MIME, "image/svg+xml"}
    assert bundle[jupyter.WIDGET_MIME]["model_id"] == made[0].model_id
    svg = bundle["image/svg+xml"].replace("&#45;", "-")  # Graphviz escapes '-' in attributes
    assert 'id="n-layer:#0"' in svg  # depth 0: the root drawn as one box
    assert svg.count("tgr-tensor") == 2  # the model's input and output only
    sent = []
    made[0].send = lambda content, buffers=None: sent.append(buffers[0].decode())
    made[0]._answer(made[0], {"ask": "report"}, [])
    assert script_json(sent[0], "tgr-config")["preset"]["depth"] == 0


@pytest.mark.needs("fully_shard")
@pytest.mark.needs("copy_in_given_its_output")
def test_an_unshard_box_times_the_whole_unshard() -> None:
    import torch.distributed.fsdp  # noqa: F401  registers torch.ops.fsdp

    from torchgraphrec.report.describe import drawn_graph

    graph = tgr.record(_Unsharding(), torch.ones(1, 2)).graph
    box = drawn_graph(graph).nodes["unshard:op:all_gather_copy_in#2"]
    members = [a for _, a in graph.nodes(data=True) if a["kind"] == "op"
               and a["parent"] == "layer:#0" and a["name"] != "linear"]
    assert len(members) == 3  # the two buffers it makes, and the copy-in
    assert box["t_start_ns"] == min(a["t_start_ns"] for a in members)
    assert box["forward_ms"] == (box["t_end_ns"] - box["t_start_ns"]) / 1e6
    assert box["self_ms"] == pytest.approx(sum(a["self_ms"] for a in members))


def test_a_diffs_header_counts_side_b_as_it_says() -> None:
    # its parameters were side B's and its op and tensor counts the union's
    torch.manual_seed(0)
    old = tgr.record(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1),
                                   nn.Linear(8, 2)).eval(), torch.randn(2, 4))
    new = tgr.record(nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.Linear(16, 2)).eval(),
                     torch.randn(2, 4))
    union = tgr.diff(old, new).union
    counts = {kind: sum(1 for _, k in new.graph.nodes(data="kind") if k == kind)
              for kind in ("layer", "op", "tensor", "param")}
    assert facts(union)["counts"] == counts
    assert "<span title=\"the counts, totals and times after it are side B's: the newer run\">" \
        "side B:</span>" in to_html(union)
