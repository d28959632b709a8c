"""Costs on the graph: each layer call's inclusive FLOPs and saved bytes, and times in ms.

Nothing here imports torch: it works on any graph in the schema, saved ones included.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from torchgraphrec.graph import backward_ns

__all__ = ["SUMMED", "add_costs"]

#: Op attributes a layer call sums over everything inside it.
SUMMED = ("flops", "backward_flops", "saved_bytes")
_NS_PER_MS = 1e6

Attrs = dict[str, Any]


def add_costs(graph: nx.DiGraph) -> nx.DiGraph:
    """Add the cost attributes that follow from the recorded ones (schema "Costs"):
    inclusive :data:`SUMMED` on layer calls and their totals on the graph, ``forward_ms``
    and ``self_ms`` on ops and layers, ``backward_ms`` where a backward was timed, and
    ``output_bytes`` on layers from their outputs' ``bytes``. Returns ``graph``.

    >>> g = nx.DiGraph()
    >>> g.add_node("layer:#0", kind="layer", parent=None, t_start_ns=0, t_end_ns=4_000_000,
    ...            outputs=("tensor:0@v0",))
    >>> g.add_node("op:mm#0", kind="op", parent="layer:#0", t_start_ns=1_000_000,
    ...            t_end_ns=2_000_000, flops=48)
    >>> g.add_node("tensor:0@v0", kind="tensor", parent="layer:#0", bytes=32)
    >>> attrs = add_costs(g).nodes["layer:#0"]
    >>> attrs["flops"], attrs["forward_ms"], attrs["self_ms"], attrs["output_bytes"]
    (48, 4.0, 3.0, 32)
    >>> g.graph["flops"]
    48
    """
    # networkx's own node dict: a lookup there costs a fraction of one through graph.nodes
    attrs_of: dict[Any, Attrs] = graph._node
    layers, ops, inner = _add_times(attrs_of)
    # in SUMMED's order (a set's would follow the string hash seed, and so would the keys'
    # order in the graph's JSON). The ops' keys in one pass in C: a scan per name in Python
    # ends at the first op where costs were counted, but runs through every op of the usual
    # recording, where none were
    present = set().union(*ops)
    recorded = [name for name in SUMMED if name in present]
    if recorded:
        graph.graph.update(_sum_up(attrs_of, layers, ops, recorded))
    _add_self_times(attrs_of, layers, inner)
    return graph


def _sum_up(attrs_of: dict[Any, Attrs], layers: list[tuple[Any, Attrs]], ops: list[Attrs],
            recorded: list[str]) -> dict[str, int]:
    """Each op's ``recorded`` values into every layer call around it; returns the totals.

    A value is on every op and call of a forward that counted it, 0 where nothing ran, and
    on none of a forward that did not: in a ``Recorder``, a forward under ``no_grad``
    saves nothing for a backward, and its calls read no saved bytes rather than 0. A
    forward that ran no op reads 0.
    """
    roots: dict[Any, Attrs] = {}
    # an op outside every call (a collective in the backward) reads 0 where it has no
    # value, as every op did before forwards were told apart (no id() is -1)
    op_roots = [-1 if attrs["parent"] is None else id(_root(attrs_of, attrs["parent"], roots))
                for attrs in ops]
    counted = {name: {-1} | {root for attrs, root in zip(ops, op_roots) if name in attrs}
               for name in recorded}
    with_ops = set(op_roots)
    for node, attrs in layers:
        root = id(_root(attrs_of, node, roots))
        for name in recorded:
            if root in counted[name] or root not in with_ops:
                attrs[name] = 0
    totals: dict[str, int] = {}
    chains: dict[Any, list[Attrs]] = {}  # parent id -> the attrs of it and its ancestors
    for attrs, root in zip(ops, op_roots):
        for name in recorded:
            value = attrs.get(name)
            if value is None:
                if root in counted[name]:
                    attrs[name] = 0
                continue
            totals[name] = totals.get(name, 0) + value
            if value:
                parent = attrs["parent"]
                chain = chains.get(parent)
                if chain is None:
                    chain = chains[parent] = _ancestors(attrs_of, parent)
                for layer in chain:
                    layer[name] += value
    return totals


def _root(attrs_of: dict[Any, Attrs], node: Any, roots: dict[Any, Attrs]) -> Attrs:
    """The attrs of the top call of the forward that layer call ``node`` ran in (``roots``
    remembers each call's)."""
    path = []
    while node not in roots:
        parent = attrs_of[node]["parent"]
        if parent is None:
            roots[node] = attrs_of[node]
            break
        path.append(node)
        node = parent
    root = roots[node]
    for passed in path:
        roots[passed] = root
    return root


def _ancestors(attrs_of: dict[Any, Attrs], parent: Any) -> list[Attrs]:
    chain = []
    while parent is not None:
        attrs = attrs_of[parent]
        chain.append(attrs)
        parent = attrs["parent"]
    return chain


def _add_times(attrs_of: dict[Any, Attrs]
               ) -> tuple[list[tuple[Any, Attrs]], list[Attrs], dict[Any, float]]:
    """``forward_ms``, ``backward_ms``, and ``self_ms`` on ops, in one pass over the nodes;
    returns the layers, the ops, and each parent's children's ``forward_ms`` sum (in the
    graph's order: the same float sum each time)."""
    layers: list[tuple[Any, Attrs]] = []
    ops: list[Attrs] = []
    inner: dict[Any, float] = {}
    inner_get = inner.get
    for node, attrs in attrs_of.items():
        kind = attrs["kind"]
        if kind != "op" and kind != "layer":
            continue
        # max(0, end - start) in ms, without a call: this runs for every layer call and op
        span = attrs["t_end_ns"] - attrs["t_start_ns"]
        forward = attrs["forward_ms"] = span / _NS_PER_MS if span > 0 else 0.0
        if "t_backward_start_ns" in attrs:
            attrs["backward_ms"] = backward_ns(attrs) / _NS_PER_MS
        if kind == "op":
            attrs["self_ms"] = forward
            ops.append(attrs)
        else:
            layers.append((node, attrs))
        parent = attrs["parent"]
        if parent is not None:
            inner[parent] = inner_get(parent, 0.0) + forward
    return layers, ops, inner


def _add_self_times(attrs_of: dict[Any, Attrs], layers: list[tuple[Any, Attrs]],
                    inner: dict[Any, float]) -> None:
    """``self_ms`` and ``output_bytes`` on layer calls."""
    inner_get, node_get = inner.get, attrs_of.get
    for node, attrs in layers:
        own = attrs["forward_ms"] - inner_get(node, 0.0)
        attrs["self_ms"] = own if own > 0.0 else 0.0  # max(0.0, own), without a call
        outputs = attrs.get("outputs", ())
        if len(outputs) == 1:  # the usual call: no list, no comprehension
            output = node_get(outputs[0])
            size = None if output is None else output.get("bytes")
            if size is not None:
                attrs["output_bytes"] = size
        elif outputs:
            sizes = [attrs_of[t].get("bytes") for t in outputs if t in attrs_of]
            if sizes and None not in sizes:
                attrs["output_bytes"] = sum(sizes)
