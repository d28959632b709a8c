"""Costs written onto real recordings from known values, until capture records them itself."""

from __future__ import annotations

import math

import networkx as nx
import torch
from torch import nn

import torchgraphrec as tgr

__all__ = ["Tower", "recorded", "linear_flops", "annotate"]


class Tower(nn.Module):
    """Linear layers of growing width (FLOPs spanning decades), two of them in a block."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 256))
        self.head = nn.Linear(256, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.small(x)))


def recorded() -> tgr.Recording:
    torch.manual_seed(0)
    return tgr.record(Tower(), torch.randn(3, 4))


def linear_flops(rows: int, inputs: int, outputs: int) -> int:
    """A linear layer's FLOPs as PyTorch's formula counts them: a multiply and an add per
    weight and row."""
    return 2 * rows * inputs * outputs


def _op_costs(graph: nx.DiGraph, op: str) -> dict[str, float]:
    attrs = graph.nodes[op]
    weights = [graph.nodes[s]["shape"] for s in graph.predecessors(op)
               if graph.nodes[s]["kind"] == "param" and len(graph.nodes[s]["shape"]) == 2]
    rows = attrs["shape"][0]
    flops = linear_flops(rows, weights[0][1], weights[0][0]) if attrs["name"] == "linear" else 0
    return {"flops": flops, "saved_bytes": 4 * math.prod(attrs["shape"]),
            "forward_ms": (attrs["t_end_ns"] - attrs["t_start_ns"]) / 1e6}


def annotate(graph: nx.DiGraph) -> nx.DiGraph:
    """``graph`` with the costs of the schema: ``flops`` and ``saved_bytes`` of each op
    (linear ops by their formula, others 0; 4 bytes per result element), summed into
    every call above it, and ``forward_ms`` of each op and call from its times."""
    for op, attrs in graph.nodes(data=True):
        if attrs["kind"] != "op":
            continue
        costs = _op_costs(graph, op)
        attrs.update(costs)
        layer = attrs["parent"]
        while layer is not None:
            for name in ("flops", "saved_bytes"):
                graph.nodes[layer][name] = graph.nodes[layer].get(name, 0) + costs[name]
            layer = graph.nodes[layer]["parent"]
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] == "layer":
            attrs["forward_ms"] = (attrs["t_end_ns"] - attrs["t_start_ns"]) / 1e6
    return graph
