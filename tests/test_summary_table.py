"""summary(): one row per call, parameters counted as torchinfo counts them, costs where recorded."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from models import ZOO, ResNetLike
from torchgraphrec.calltable import call_rows, totals
from torchgraphrec.text import cost_text

torchinfo = pytest.importorskip("torchinfo")


def _torchinfo(model: nn.Module, args: tuple, kwargs: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchinfo's own deprecation warnings
        return torchinfo.summary(model, input_data=list(args) or None, verbose=0, **kwargs)


def _tied_extra(model: nn.Module) -> int:
    """The elements torchinfo counts again for each further module holding a tied weight."""
    every = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    return every - sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(ZOO))
def test_parameter_totals_equal_torchinfos(name: str) -> None:
    case = fresh(name)
    theirs = _torchinfo(case.model, case.args, case.kwargs)
    found = totals(tgr.record(*fresh(name)).graph)
    # a tied weight (T5's shared embedding) is one tensor: counted once here, by torchinfo
    # once per module holding it; no other difference
    extra = _tied_extra(case.model)
    assert (name == "t5") == (extra > 0)
    assert found["params"] == theirs.total_params - extra == \
        sum(p.numel() for p in case.model.parameters())
    assert found["trainable_params"] == theirs.trainable_params - extra
    assert found["param_bytes"] == sum(p.numel() * p.element_size()
                                       for p in case.model.parameters())


def _frozen_backbone() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = ResNetLike([2, 2])
    for module in (model.stem, model.layers):
        module.requires_grad_(False)
    return model, torch.randn(2, 3, 16, 16)


def test_a_frozen_backbone_counts_as_torchinfo_does() -> None:
    model, x = _frozen_backbone()
    theirs = _torchinfo(model, (x,), {})
    rec = tgr.record(model, x, backward=True)
    found = totals(rec.graph)
    assert (found["params"], found["trainable_params"]) == \
        (theirs.total_params, theirs.trainable_params) == (19_322, 170)
    lines = rec.summary().splitlines()
    assert ["Trainable params: 170", "Non-trainable params: 19,152"] == \
        [line for line in lines if "rainable params" in line]
    conv = next(line for line in lines if line.split()[:3] == ["Conv2d", "(0):", "2-1"])
    fc = next(line for line in lines if line.split()[:3] == ["Linear", "(fc):", "1-5"])
    assert conv.split()[5] == "(432)" and fc.split()[5] == "170"  # frozen ones in brackets


#: Models whose modules all run: torchinfo lists a container that never runs (a
#: ModuleList) as a row of its own and counts it in its labels; the graph has no call there.
ALL_CALLED = ["mlp", "inplace", "structured_outputs", "two_inputs_kwargs", "reused_module",
              "looped_linear", "recurrent", "multihead_attention", "functional", "embedding",
              "direct_parameter", "no_grad_block"]


@pytest.mark.parametrize("name", ALL_CALLED)
def test_depth_idx_labels_are_torchinfos(name: str) -> None:
    case = fresh(name)
    theirs = _torchinfo(case.model, case.args, case.kwargs)
    rows = call_rows(tgr.record(*fresh(name)).graph)
    assert [row["label"] for row in rows if row["depth"]] == \
        [f"{layer.depth}-{layer.depth_index}" for layer in theirs.summary_list if layer.depth]


@pytest.mark.parametrize("name", ["resnet_like", "reused_module", "looped_linear", "t5", "gpt2"])
def test_the_params_column_sums_to_the_total_at_every_depth(name: str) -> None:
    graph = tgr.record(*fresh(name)).graph
    total = totals(graph)["params"]
    deepest = max(attrs["depth"] for attrs in nodes_of(graph, "layer").values())
    for depth in [*range(deepest + 1), None]:
        rows = call_rows(graph, depth)
        assert sum(row["params_counted"] for row in rows) == total
        assert all(row["params_counted"] == 0 for row in rows if not row["first_call"])


def test_depth_limits_the_rows_and_keeps_the_labels() -> None:
    rec = tgr.record(*fresh("resnet_like"))
    everything = call_rows(rec.graph)
    labels = {row["node"]: row["label"] for row in everything}
    for depth in (0, 1, 2):
        rows = call_rows(rec.graph, depth)
        assert [row["node"] for row in rows] == \
            [row["node"] for row in everything if row["depth"] <= depth]
        assert all(labels[row["node"]] == row["label"] for row in rows)
        text = rec.summary(depth=depth).splitlines()
        assert len(text) == 2 + len(rows) + 1 + 7  # header, rule, rows, rule, footer
    shallow = rec.summary(depth=1).splitlines()
    # at the depth limit a row counts everything inside it, as torchinfo shows it
    stem = next(line for line in shallow if line.split()[:3] == ["Sequential", "(stem):", "1-1"])
    assert stem.split()[5:7] == ["464", "2.40%"]
    with pytest.raises(ValueError, match="depth must be None or an int >= 0, got -1"):
        rec.summary(depth=-1)


@pytest.mark.needs("saved_bytes")
def test_cost_columns_appear_where_recorded() -> None:
    plain = tgr.record(*fresh("mlp")).summary().splitlines()
    assert "FLOPs" not in plain[0] and "Saved" not in plain[0] and "Forward" in plain[0]
    assert "Backward" not in plain[0]
    assert "Saved activations: not counted (memory=True counts them where torch allows)" in plain
    counted = tgr.record(*fresh("mlp"), flops=True, memory=True, backward=True)
    header = counted.summary().splitlines()[0].split()
    assert header[-6:] == ["FLOPs", "Backward", "FLOPs", "Saved", "Forward", "Backward"]
    with torch.no_grad():  # nothing is saved for a backward: nothing to say about it
        lines = tgr.record(*fresh("mlp"), memory=True).summary().splitlines()
        assert "Saved" not in lines[0]
        assert not any(line.startswith("Saved activations") for line in lines)
        lines = tgr.record(*fresh("mlp")).summary().splitlines()
        assert not any(line.startswith("Saved activations") for line in lines)


@pytest.mark.needs("saved_bytes")
def test_rows_and_footer_show_the_graphs_numbers() -> None:
    rec = tgr.record(*fresh("mlp"), flops=True, memory=True, backward=True)
    graph, lines = rec.graph, rec.summary().splitlines()
    linear = graph.nodes["layer:0#0"]
    row = next(line for line in lines if line.split()[:3] == ["Linear", "(0):", "1-1"])
    assert cost_text(linear["flops"], "flops") in row  # 2 * 3 * 8 * 16 = 768 FLOPs
    assert "768 FLOPs" in row and "3×8" in row and "3×16" in row
    assert f"Total FLOPs: {cost_text(graph.graph['flops'], 'flops')} forward, " \
           f"{cost_text(graph.graph['backward_flops'], 'flops')} backward" in lines
    assert f"Saved activations: {cost_text(graph.graph['saved_bytes'], 'bytes')}" in lines
    assert "Input size: 96 B" in lines and "Params size: 848 B" in lines
    assert lines[-1] == "4 module calls in Sequential"


def test_a_recording_without_trainable_counts_leaves_them_out() -> None:
    graph = tgr.from_json(tgr.to_json(tgr.record(*fresh("mlp")).graph))
    for attrs in nodes_of(graph, "layer").values():
        del attrs["trainable_params"]  # as saved before they were recorded
    lines = tgr.Recording(graph).summary().splitlines()
    assert "Total params: 212" in lines
    assert not any("rainable" in line for line in lines)


def test_a_summary_before_anything_is_recorded_says_so() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    with tgr.Recorder(model) as rec:
        text = rec.summary()
        model(torch.randn(2, 3))
    assert text.splitlines()[-1] == "0 module calls in Sequential"
    assert "1 module calls" not in text and "3 module calls in Sequential" in rec.summary()
