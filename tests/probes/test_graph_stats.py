"""Probe statistics on the graph, drawn with color_by; repeated forwards fold cleanly."""

from __future__ import annotations

import re

import networkx as nx
import pytest

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from render.layout import layout
from torchgraphrec import select as S
from torchgraphrec.recording import backward_loss
from torchgraphrec.render.theme import SCALE


@pytest.fixture(scope="module")
def trained() -> tgr.Recorder:
    case = fresh("resnet_like")
    probes = [tgr.probe("grad_output", where=S.leaves(), keep="rms"),
              tgr.probe("param_grad", keep="l2")]
    with tgr.Recorder(case.model, probes=probes) as rec:
        for _ in range(3):
            backward_loss(case.model(*case.args)).backward()
            rec.step()
    return rec


def test_statistics_become_node_attributes(trained) -> None:
    graph = trained.recording.graph
    tgr.validate(graph)
    table = trained.frame()
    conv = table[(table.module == "layers.0.0.conv1") & (table.site == "grad_output")]
    for call in ("layer:layers.0.0.conv1#0", "layer:layers.0.0.conv1#2"):
        assert graph.nodes[call]["grad_output.rms"] == pytest.approx(conv.value.mean())
    weight = table[(table.module == "fc") & (table.path == "weight")]
    assert graph.nodes["param:fc.weight"]["param_grad.l2"] == pytest.approx(weight.value.mean())
    assert "grad_output.rms" not in graph.nodes["layer:#0"]  # the root is not a leaf


def test_color_by_paints_nodes_and_draws_a_legend(trained) -> None:
    dot = trained.recording.to_dot(color_by="grad_output.rms", depth=3)
    drawing = layout(dot)
    legend = next(o for o in drawing["objects"] if o.get("id") == "legend")
    assert legend["class"] == "tgr-legend"
    assert "grad_output.rms (log scale)" in dot
    boxes = [o for o in drawing["objects"] if o.get("class") == "tgr-box"]
    fills = {o["fillcolor"] for o in boxes if "fillcolor" in o}
    assert fills and fills <= set(SCALE) and len(fills) > 1
    assert not re.search(r'"#[0-9a-fA-F]{3}"', dot)


def test_color_by_an_absent_attribute_draws_as_usual_and_says_so(trained) -> None:
    plain = trained.recording.to_dot()
    with pytest.warns(UserWarning, match=r"no 'output.nothing' value, so nothing is coloured "
                                         r"\(values it has: .*'grad_output.rms'"):
        assert trained.recording.to_dot(color_by="output.nothing") == plain


def test_repeated_forwards_stay_apart_and_do_not_cross(trained) -> None:
    # three independent steps, each on its own batch: parallel calls, not a chain, so they
    # are not folded into one "× 3" (which would read as three blocks one after another)
    labels = [o["label"] for o in layout(trained.recording.to_dot())["objects"]
              if o["name"].startswith("cluster_")]
    assert {"ResNetLike", "ResNetLike #1", "ResNetLike #2"} <= set(labels)
    assert not any("ResNetLike  ×" in label for label in labels)
    folded = tgr.collapse(trained.recording.graph, 0)
    roots = sorted(n for n, a in nodes_of(folded, "layer").items())
    assert roots == ["layer:#0", "layer:#1", "layer:#2"]
    assert not any(folded.has_edge(a, b) for a in roots for b in roots)


def test_collapse_drops_edges_of_folded_parameters() -> None:
    graph = tgr.record(*fresh("reused_module")).graph
    folded = tgr.collapse(graph, 1)
    params = [s for s, _, a in graph.edges(data=True) if a["kind"] == "param"]
    assert params and not any(n.startswith("param:") for n in folded)
    # shared#0 feeds shared#1 for real; only its parameters "reach" shared#2
    assert folded.has_edge("layer:shared#0", "layer:shared#1")
    assert not folded.has_edge("layer:shared#0", "layer:shared#2")
    assert nx.is_directed_acyclic_graph(folded)
