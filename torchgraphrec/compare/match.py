"""Matching the nodes of two recordings by what they are, never by their ids."""

from __future__ import annotations

from typing import Any, Hashable, Optional

import networkx as nx

__all__ = ["node_keys", "match"]

Key = tuple


def _layer_key(attrs: dict) -> Key:
    return ("layer", attrs["qualname"], attrs["call_index"])


def _parent_key(graph: nx.DiGraph, attrs: dict) -> Optional[Key]:
    parent = attrs["parent"]
    return None if parent is None else _layer_key(graph.nodes[parent])


def _producer(graph: nx.DiGraph, node: str) -> Optional[str]:
    # With ops recorded a tensor comes out of one op; with ops="none" out of a call, which
    # its ``parent`` names (an outer call returning it too adds an edge, not a producer).
    ops = [(graph.edges[s, node]["seq"], s) for s in graph.predecessors(node)
           if graph.nodes[s]["kind"] == "op"]
    if ops:
        return min(ops)[1]
    layers = [s for s in graph.predecessors(node) if graph.nodes[s]["kind"] == "layer"]
    return graph.nodes[node]["parent"] if layers else None


def _ordered(graph: nx.DiGraph, kind: str) -> list[tuple[str, dict]]:
    return sorted(((n, a) for n, a in graph.nodes(data=True) if a["kind"] == kind),
                  key=lambda item: item[1]["seq"])


def _counted(base: Hashable, counts: dict) -> Key:
    """``base`` and how many times it was seen before: the occurrence within its group."""
    index = counts.get(base, 0)
    counts[base] = index + 1
    return (*base, index)  # type: ignore[misc]


def _tensor_base(graph: nx.DiGraph, node: str, attrs: dict, keys: dict) -> Key:
    producer = _producer(graph, node)
    role = attrs["role"]
    if producer is not None:
        # A model output is never the same node as an intermediate: a report's page draws
        # the union's outputs on both sides, so a match would add one to the old side.
        return ("tensor", keys[producer]) + (("output",) if role == "output" else ())
    if role == "input":
        return ("tensor", "input", attrs.get("name"))
    return ("tensor", role, _parent_key(graph, attrs))


def node_keys(graph: nx.DiGraph) -> dict[str, Key]:
    """Each node's identity in terms that survive a change elsewhere in the model.

    A layer call is ``(qualname, call_index)``, a param its ``qualname``, an op its parent
    call, name and occurrence among the call's ops of that name, a tensor the op or call
    that produced it, whether it is a model output, and its occurrence among that
    producer's tensors (a model input its ``name``; a constant the call that used it and
    its occurrence).

    >>> g = nx.DiGraph()
    >>> g.add_node("layer:#0", kind="layer", qualname="", call_index=0, parent=None, seq=0)
    >>> g.add_node("op:relu#3", kind="op", name="relu", parent="layer:#0", seq=1)
    >>> node_keys(g)["op:relu#3"]
    ('op', ('layer', '', 0), 'relu', 0)
    """
    keys: dict[str, Key] = {}
    for node, attrs in _ordered(graph, "layer"):
        keys[node] = _layer_key(attrs)
    for node, attrs in _ordered(graph, "param"):
        keys[node] = ("param", attrs["qualname"])
    counts: dict[Any, int] = {}
    for node, attrs in _ordered(graph, "op"):
        keys[node] = _counted(("op", _parent_key(graph, attrs), attrs["name"]), counts)
    for node, attrs in _ordered(graph, "tensor"):
        keys[node] = _counted(_tensor_base(graph, node, attrs, keys), counts)
    return _unique(keys)


def _unique(keys: dict[str, Key]) -> dict[str, Key]:
    # Keys are unique by construction for graphs in the schema; a hand-made graph that
    # repeats a qualname still gets one key per node, in seq order.
    seen: dict[Key, int] = {}
    result = {}
    for node, key in keys.items():
        seen[key] = seen.get(key, -1) + 1
        result[node] = key if not seen[key] else (*key, "repeat", seen[key])
    return result


def match(a: nx.DiGraph, b: nx.DiGraph) -> dict[str, str]:
    """The nodes of ``a`` that ``b`` has too: ``{id in a: id in b}``.

    >>> a, b = nx.DiGraph(), nx.DiGraph()
    >>> a.add_node("param:w", kind="param", qualname="w", parent=None, seq=0)
    >>> b.add_node("param:w", kind="param", qualname="w", parent=None, seq=3)
    >>> match(a, b)
    {'param:w': 'param:w'}
    """
    in_b = {key: node for node, key in node_keys(b).items()}
    return {node: in_b[key] for node, key in node_keys(a).items() if key in in_b}
