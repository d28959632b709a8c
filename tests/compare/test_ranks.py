"""compare_ranks on recordings made in this process: what tells two ranks' graphs apart."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchgraphrec as tgr


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


@pytest.mark.parametrize("ops", ["torch", "autograd", None])
def test_a_smaller_last_batch_is_another_graph_whatever_ops_record(ops) -> None:
    model = _mlp()
    graphs = []
    for rank, batch in enumerate((4, 3)):
        graph = tgr.record(model, torch.ones(batch, 8), ops=ops).graph
        graph.graph["rank"] = rank
        graphs.append(graph)
    # the truth: the two graphs hold tensors of other shapes
    shapes = [sorted(a["shape"] for _, a in g.nodes(data=True) if a["kind"] == "tensor")
              for g in graphs]
    assert shapes[0] != shapes[1]
    result = tgr.compare_ranks(graphs)
    assert result.divergent == [1]
    assert "(3×8" in result.partings[1] and "(4×8" in result.partings[1]


@pytest.mark.parametrize("ops", ["torch", None])
def test_another_dtype_is_another_graph(ops) -> None:
    model = _mlp()
    plain = tgr.record(model, torch.ones(4, 8), ops=ops).graph
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = tgr.record(model, torch.ones(4, 8), ops=ops).graph
    result = tgr.compare_ranks([plain, autocast])
    assert result.divergent == [1]
    assert "bfloat16" in result.partings[1] and "float32" in result.partings[1]


def test_the_same_recording_twice_is_the_same_graph() -> None:
    model = _mlp()
    graphs = [tgr.record(model, torch.ones(4, 8)).graph for _ in range(2)]
    result = tgr.compare_ranks(graphs)
    assert result.same and result.summary() == "2 ranks ran the same graph (ranks [0, 1])"
