"""A Llama-3-70B-shaped model on the meta device: every block, op and parameter, no memory."""

from __future__ import annotations

import os

import torch

import torchgraphrec as tgr
from helpers import nodes_of
from llama import LLAMA_3_70B, llama_meta


def _rss_mb() -> float:
    with open("/proc/self/statm") as stream:
        return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def test_llama_3_70b_shaped_records_under_no_grad_on_meta_without_allocating() -> None:
    case = llama_meta()
    with torch.no_grad():
        case.model(*case.args)  # warm: what the plain forward needs is not ours
        before = _rss_mb()
        graph = tgr.record(*case).graph
        grown = _rss_mb() - before
    assert grown < 300, f"RSS grew {grown:.0f} MB"
    tgr.validate(graph)
    layers = {a["qualname"] for a in nodes_of(graph, "layer").values()}
    assert {f"layers.{i}.mlp.down_proj" for i in range(LLAMA_3_70B["layers"])} <= layers
    params = nodes_of(graph, "param")
    assert len(params) == sum(1 for _ in case.model.parameters()) == 723
    ops = [a["name"] for a in nodes_of(graph, "op").values()]
    assert ops.count("scaled_dot_product_attention") == 80 and ops.count("linear") == 80 * 7 + 1
    assert all(a["device"] == "meta" for a in nodes_of(graph, "tensor").values())
