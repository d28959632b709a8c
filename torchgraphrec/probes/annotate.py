"""Putting probe statistics onto the recorded graph, as node attributes named ``site.stat``."""

from __future__ import annotations

import math
import networkx as nx
import torch

from torchgraphrec.probes.store import Store

__all__ = ["annotate", "PARAM_SITES"]

PARAM_SITES = ("param", "param_grad", "param_update")


def annotate(graph: nx.DiGraph, store: Store) -> None:
    """Add each module's mean scalar statistic to its layer nodes (all its calls), and each
    parameter's to its param node: ``graph.nodes[n]["grad_output.rms"]``; ``nan`` values
    (a first cosine) are left out of the mean."""
    values: dict[tuple[str, str], list[torch.Tensor]] = {}
    for seen, stat, value in store.rows:
        target = seen.module
        if seen.site in PARAM_SITES:
            target = f"{seen.module}.{seen.path}" if seen.module else seen.path
        values.setdefault((target, f"{seen.site}.{stat}"), []).append(value)
    means: dict[str, dict[str, float]] = {}
    for (target, name), items in values.items():
        mean = float(torch.stack(items).double().nanmean())
        if not math.isnan(mean):
            means.setdefault(target, {})[name] = mean
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] in ("layer", "param"):
            attrs.update(means.get(attrs["qualname"], {}))
