"""The old side of a diff's union (the report's "side A") draws the old recording as it was."""

from __future__ import annotations

import networkx as nx
import torch
from torch import nn

import torchgraphrec as tgr
from torchgraphrec.render.sides import old_side


def mlp(*layers: nn.Module) -> tgr.Recording:
    torch.manual_seed(0)
    return tgr.record(nn.Sequential(*layers), torch.randn(4, 8))


def narrowed() -> tgr.GraphDiff:
    """Five calls at width 16 against three at width 32, with another activation."""
    old = mlp(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
    return tgr.diff(old, mlp(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 2)))


def in_union(found: tgr.GraphDiff, node: str) -> str:
    """Where a node of ``a`` is in the union."""
    if node in found.matches:
        return found.matches[node]
    return node if node not in found.b else node + "~a"


def boundary(graph: nx.DiGraph, layer: str) -> tuple:
    attrs = graph.nodes[layer]
    return tuple(tuple(graph.nodes[t]["shape"] for t in attrs[side] if t in graph)
                 for side in ("inputs", "outputs"))


def test_every_call_of_the_old_side_has_its_old_shapes() -> None:
    found = narrowed()
    side = old_side(found.union)
    layers = [n for n, kind in found.a.nodes(data="kind") if kind == "layer"]
    assert {n: boundary(side, in_union(found, n)) for n in layers} == \
        {n: boundary(found.a, n) for n in layers}


def test_the_old_side_has_only_the_old_models_outputs() -> None:
    found = narrowed()
    # the page draws the union's outputs on either side, but not what that side lacks
    drawn = [a["shape"] for _, a in found.union.nodes(data=True)
             if a.get("role") == "output" and a["diff"] != "added"]
    assert drawn == [a["shape"] for _, a in found.a.nodes(data=True) if a.get("role") == "output"]
    new = [a["shape"] for _, a in found.union.nodes(data=True)
           if a.get("role") == "output" and a["diff"] != "removed"]
    assert new == [a["shape"] for _, a in found.b.nodes(data=True) if a.get("role") == "output"]
