"""Either side of a compared pair, drawn plain, from the union graph's own record of it."""

from __future__ import annotations

import networkx as nx

__all__ = ["old_side", "plain"]


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


def plain(union: nx.DiGraph) -> nx.DiGraph:
    """The union as a recording of its own, drawn without a diff's marks (its nodes keep
    their status, which keeps added and removed blocks out of each other's folds).

    >>> plain(nx.DiGraph(model="M", diff_a_model="M")).graph
    {'model': 'M'}
    """
    found = union.copy()
    found.graph.pop("diff_a_model", None)
    return found
