"""Side A of a compared pair, drawn from the union graph's own record of what changed."""

from __future__ import annotations

from typing import Any

import networkx as nx

__all__ = ["is_union", "old_side", "old_forms"]


def is_union(graph: nx.DiGraph) -> bool:
    """Whether ``graph`` is the union of two compared recordings (compare/union.py)."""
    return "diff_a_model" in graph.graph


def old_side(union: nx.DiGraph) -> nx.DiGraph:
    """The union with every changed node's describing attributes set back to side A's
    values (``diff_changes`` holds ``{attribute: (old, new)}``); shapes derived from the
    boundary tensors follow those tensors' own old shapes.

    >>> g = nx.DiGraph(diff_a_model="M")
    >>> g.add_node("l", kind="layer", type="GELU", diff="changed",
    ...            diff_changes={"type": ("ReLU", "GELU"), "output_shapes": ((), ())})
    >>> old_side(g).nodes["l"]["type"], g.nodes["l"]["type"]
    ('ReLU', 'GELU')
    """
    old = union.copy()
    for _, attrs in old.nodes(data=True):
        for name, (before, _) in (attrs.get("diff_changes") or {}).items():
            if name in attrs:
                attrs[name] = before
    return old


def old_forms(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """Where side A's drawing description differs from the union's: per node number, its
    box form (``[own, extra, width]``) and cluster form (``[attributes, title width]``)."""
    boxes = {i: [old["own"][i], old["extra"][i], old["width"][i]]
             for i in range(len(new["own"]))
             if (new["own"][i], new["extra"][i]) != (old["own"][i], old["extra"][i])}
    clusters = {i: [old["cluster"][i], old["title"][i]] for i in new["cluster"]
                if new["cluster"][i] != old["cluster"][i]}
    return {"box": boxes, "cluster": clusters}
