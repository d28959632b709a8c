"""Putting probe statistics onto the recorded graph, as node attributes named ``site.stat``."""

from __future__ import annotations

import math

import networkx as nx

from torchgraphrec.probes.store import Store

__all__ = ["annotate", "PARAM_SITES"]

PARAM_SITES = ("param", "param_grad", "param_update")


def _mean(items: list[float]) -> float:
    """The mean of ``items`` leaving ``nan`` out, as ``nanmean`` (``nan`` if all are).

    >>> _mean([1.0, float("nan"), 2.0]), _mean([float("nan")])
    (1.5, nan)
    """
    finite = [value for value in items if value == value]  # nan is unequal to itself
    return sum(finite) / len(finite) if finite else math.nan


def annotate(graph: nx.DiGraph, store: Store) -> None:
    """Add each module's scalar statistics to its layer nodes (all its calls), and each
    parameter's to its param node: ``graph.nodes[n]["grad_output.rms"]`` is the mean over
    steps of each step's mean. ``probe_series`` holds the per-step means,
    ``{name: [[step, mean], ...]}``, for plots; ``nan`` values (a first cosine) are left
    out of both, and so are infinite means (strict JSON, which the graph is saved as, has
    no token for them)."""
    if not store.rows:
        return
    values: dict[tuple[str, str, int], list[float]] = {}
    for (seen, stat, _), value in zip(store.rows, store.floats()):
        target = seen.module
        if seen.site in PARAM_SITES:
            target = f"{seen.module}.{seen.path}" if seen.module else seen.path
        values.setdefault((target, f"{seen.site}.{stat}", seen.step), []).append(value)
    series: dict[str, dict[str, list[list[float]]]] = {}
    for (target, name, step), items in values.items():
        mean = _mean(items)
        if math.isfinite(mean):  # a first cosine has no value to plot
            series.setdefault(target, {}).setdefault(name, []).append([step, mean])
    for _, attrs in graph.nodes(data=True):
        found = series.get(attrs["qualname"]) if attrs["kind"] in ("layer", "param") else None
        if not found:
            continue
        for name, points in found.items():
            attrs[name] = sum(value for _, value in points) / len(points)
        attrs["probe_series"] = {name: sorted(points) for name, points in found.items()}
