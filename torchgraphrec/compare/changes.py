"""What describes a node of the model, and how two matched nodes differ in it."""

from __future__ import annotations

from typing import Any, Mapping

import networkx as nx

__all__ = ["DESCRIBING", "describe", "changes"]

#: The attributes compared, by kind: what the model is, never how one run of it went
#: (times, ``seq``, ids, costs, devices, autograd's ``grad_fn`` and ``requires_grad`` of
#: activations). Layer calls also compare the shapes and dtypes of what they received
#: and returned (``input_shapes``, ``output_dtypes``...).
DESCRIBING: Mapping[str, tuple[str, ...]] = {
    "layer": ("type", "settings", "training", "num_params"),
    "param": ("shape", "dtype", "requires_grad", "buffer"),
    "op": ("name", "args", "shape", "dtype"),
    "tensor": ("shape", "dtype", "role", "name", "nested"),
}


def _boundary(graph: nx.DiGraph, ids: Any, attribute: str) -> tuple:
    return tuple(graph.nodes[node].get(attribute) for node in ids or () if node in graph)


def describe(graph: nx.DiGraph, node: str) -> dict[str, Any]:
    """The describing attributes of ``node`` (absent optional ones are ``None``).

    >>> g = nx.DiGraph()
    >>> g.add_node("param:w", kind="param", shape=(4, 2), dtype="float32",
    ...            requires_grad=True, buffer=False, seq=7)
    >>> describe(g, "param:w")
    {'shape': (4, 2), 'dtype': 'float32', 'requires_grad': True, 'buffer': False}
    """
    attrs = graph.nodes[node]
    found = {name: attrs.get(name) for name in DESCRIBING[attrs["kind"]]}
    if attrs["kind"] == "layer":
        for side in ("inputs", "outputs"):
            found[f"{side[:-1]}_shapes"] = _boundary(graph, attrs.get(side), "shape")
            found[f"{side[:-1]}_dtypes"] = _boundary(graph, attrs.get(side), "dtype")
    return found


def changes(a: nx.DiGraph, a_node: str, b: nx.DiGraph, b_node: str) -> dict[str, tuple]:
    """``{attribute: (old, new)}`` for each describing attribute that differs.

    >>> a, b = nx.DiGraph(), nx.DiGraph()
    >>> a.add_node("op:gelu#2", kind="op", name="gelu", args="", shape=(2, 8), dtype="float32")
    >>> b.add_node("op:gelu#5", kind="op", name="gelu", args="approximate='tanh'",
    ...            shape=(2, 8), dtype="float32")
    >>> changes(a, "op:gelu#2", b, "op:gelu#5")
    {'args': ('', "approximate='tanh'")}
    """
    old, new = describe(a, a_node), describe(b, b_node)
    return {name: (old[name], new[name]) for name in old if old[name] != new[name]}
