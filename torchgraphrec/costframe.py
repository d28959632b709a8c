"""The module calls of a recording as a pandas DataFrame, one row per call, for sorting and plotting."""

from __future__ import annotations

from typing import Any, Optional

import networkx as nx

from torchgraphrec.calltable import call_rows

__all__ = ["costs_frame"]


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:  # the summary works without it; only the frame needs it
        raise ImportError("Recording.costs() needs pandas, which is not installed: "
                          "pip install pandas") from exc
    return pandas


def costs_frame(graph: nx.DiGraph, depth: Optional[int] = None) -> Any:
    """One row per module call down to ``depth``, in call order, with plain columns: the
    summary's rows (:func:`torchgraphrec.calltable.call_rows`) as numbers, not text.
    Columns the recording lacks (``flops`` without ``flops=True``, ``saved_bytes`` without
    ``memory=True`` or under ``no_grad``, ``backward_ms`` without a backward) are left out.

    >>> g = nx.DiGraph()
    >>> g.add_node("layer:#0", kind="layer", qualname="", type="Net", depth=0, seq=0,
    ...            parent=None, call_index=0, num_params=10, inputs=(), outputs=(),
    ...            flops=96)
    >>> costs_frame(g)[["qualname", "type", "params", "flops"]]
      qualname type  params  flops
    0           Net      10     96
    """
    pandas = _pandas()
    rows = call_rows(graph, depth)
    frame = pandas.DataFrame(rows)
    if frame.empty:
        return frame
    missing = [name for name in frame.columns if frame[name].isna().all()]
    return frame.drop(columns=missing)
