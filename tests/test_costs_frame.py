"""Recording.costs(): the summary's rows as a DataFrame whose numbers are the graph's."""

from __future__ import annotations

import sys

import pytest
import torch

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from torchgraphrec.calltable import COSTS

pandas = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def recorded() -> tgr.Recording:
    return tgr.record(*fresh("resnet_like"), flops=True, memory=True, backward=True)


@pytest.mark.needs("saved_bytes")
def test_one_row_per_call_in_call_order_with_the_graphs_numbers(recorded) -> None:
    frame, graph = recorded.costs(), recorded.graph
    layers = sorted(nodes_of(graph, "layer").items(), key=lambda item: item[1]["seq"])
    assert list(frame.node) == [node for node, _ in layers]
    for (_, attrs), row in zip(layers, frame.itertuples()):
        assert (row.qualname, row.type, row.depth, row.call_index) == \
            (attrs["qualname"], attrs["type"], attrs["depth"], attrs["call_index"])
        assert (row.params, row.trainable_params, row.param_bytes, row.output_bytes) == \
            (attrs["num_params"], attrs["trainable_params"], attrs["param_bytes"],
             attrs["output_bytes"])
        assert [getattr(row, name) for name in COSTS] == [attrs[name] for name in COSTS]
    for name in ("flops", "backward_flops", "params", "saved_bytes", "params_counted"):
        assert pandas.api.types.is_integer_dtype(frame[name]), name
    assert frame.loc[frame.node == "layer:stem.0#0", "input_shapes"].item() == "2×3×16×16"


@pytest.mark.needs("saved_bytes")
def test_its_sums_are_the_graphs_totals(recorded) -> None:
    frame, graph = recorded.costs(), recorded.graph
    root = frame[frame.depth == 0]
    for name in ("flops", "backward_flops", "saved_bytes"):
        assert root[name].sum() == graph.graph[name] > 0
    # inclusive: a call's numbers are those of the calls inside it and its own ops
    for node, attrs in nodes_of(graph, "layer").items():
        inside = frame[frame.node.isin([n for n in graph if graph.nodes[n]["parent"] == node
                                        and graph.nodes[n]["kind"] in ("layer", "op")])]
        ops = [a for a in nodes_of(graph, "op").values() if a["parent"] == node]
        assert attrs["flops"] == inside.flops.sum() + sum(op["flops"] for op in ops)
    assert frame.params_counted.sum() == frame.trainable_counted.sum() == 19_322
    assert frame.params_counted.sum() == sum(p.numel() for p in fresh("resnet_like").model.parameters())


def test_depth_and_unrecorded_columns() -> None:
    with torch.no_grad():
        rec = tgr.record(*fresh("resnet_like"))
    frame = rec.costs(depth=1)
    assert set(frame.depth) == {0, 1} and len(frame) == 6
    assert not {"flops", "backward_flops", "saved_bytes", "backward_ms"} & set(frame.columns)
    assert {"forward_ms", "self_ms", "params_counted"} <= set(frame.columns)
    assert frame.params_counted.sum() == 19_322


def test_without_pandas_the_error_says_what_to_install(recorded, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(ImportError, match=r"costs\(\) needs pandas.*pip install pandas"):
        recorded.costs()
    assert "Total params: 19,322" in recorded.summary()  # the text needs no pandas


@pytest.mark.parametrize("depth", [-1, "1", True, 1.0])
def test_costs_refuses_a_depth_as_summary_does(recorded, depth: object) -> None:
    # costs(depth=-1) was an empty frame, costs(depth="1") a bare TypeError
    for read in (recorded.costs, recorded.summary):
        with pytest.raises(ValueError, match=r"depth must be None or an int >= 0, got "):
            read(depth=depth)


def test_shapes_include_the_parameters_a_call_takes_or_returns() -> None:
    # a module returning its own parameter (learned queries) read "-", beside output bytes
    class Queries(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.queries = torch.nn.Parameter(torch.randn(4, 8))

        def forward(self) -> torch.Tensor:
            return self.queries

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.act = Queries(), torch.nn.Tanh()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.act(self.q()).T

    model, seen = Net(), {}
    for name, module in model.named_modules():
        module.register_forward_hook(lambda m, args, out, name=name: seen.setdefault(
            name, ([tuple(a.shape) for a in args], [tuple(out.shape)])) and None)
    x = torch.randn(2, 8)
    frame = tgr.record(model, x).costs()
    model(x)  # the independent truth: what plain hooks saw each call take and return
    text = lambda shapes: ", ".join("×".join(map(str, s)) for s in shapes) or "-"  # noqa: E731
    for row in frame.itertuples():
        assert (row.input_shapes, row.output_shapes) == tuple(map(text, seen[row.qualname]))
