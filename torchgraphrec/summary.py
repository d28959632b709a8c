"""A torchinfo-style table of module calls: labels, types, shapes, parameters, what is recorded."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import networkx as nx

from torchgraphrec.render.labels import shape_text

__all__ = ["summarize"]

HEADERS = ("Label", "Module", "Type", "Calls", "Output shape", "Params", "Recording")


def _graph_labels(firsts: Sequence[tuple[str, dict]]) -> dict[str, str]:
    counts: dict[int, int] = {}
    labels = {}
    for node, attrs in firsts:
        if attrs["qualname"]:
            counts[attrs["depth"]] = counts.get(attrs["depth"], 0) + 1
            labels[attrs["qualname"]] = f"{attrs['depth']}-{counts[attrs['depth']]}"
    return labels


def summarize(graph: nx.DiGraph, labels: Optional[Mapping[str, str]] = None,
              recording: Optional[Mapping[str, Sequence[str]]] = None) -> str:
    """One row per module, at its first call, in call order.

    ``labels`` maps qualnames to ``depth-idx`` labels (by default numbered in call order);
    ``recording`` maps qualnames to what probes record there (``"grad_output: rms"``).
    """
    layers = [(n, a) for n, a in graph.nodes(data=True) if a["kind"] == "layer"]
    calls: dict[str, int] = {}
    for _, attrs in layers:
        calls[attrs["qualname"]] = calls.get(attrs["qualname"], 0) + 1
    firsts = [(n, a) for n, a in layers if a["call_index"] == 0]
    labels = labels or _graph_labels(firsts)
    rows = []
    for _, attrs in firsts:
        outputs = [shape_text(graph.nodes[t]["shape"]) for t in attrs["outputs"] if t in graph]
        name = "  " * attrs["depth"] + (attrs["qualname"] or "(root)")
        rows.append((labels.get(attrs["qualname"], ""), name, attrs["type"],
                     str(calls[attrs["qualname"]]), ", ".join(outputs) or "-",
                     f"{attrs['num_params']:,}", "; ".join((recording or {}).get(attrs["qualname"], ()))))
    widths = [max(len(row[i]) for row in [HEADERS, *rows]) for i in range(len(HEADERS))]
    line = lambda row: "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()  # noqa: E731
    rule = "-" * len(line(HEADERS))
    roots = [a for _, a in firsts if a["qualname"] == ""] or [a for _, a in firsts][:1]
    total = roots[0]["num_params"] if roots else 0
    footer = f"{len(layers)} module calls, {total:,} parameters in {graph.graph.get('model', '?')}"
    return "\n".join([line(HEADERS), rule, *map(line, rows), rule, footer])
