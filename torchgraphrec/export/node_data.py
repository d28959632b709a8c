"""Model Explorer's node-data overlay: one numeric attribute per node, on a colour gradient."""

from __future__ import annotations

import json
import math
from typing import Any, Optional

import networkx as nx

from torchgraphrec.export.plan import Plan, graph_id
from torchgraphrec.graph import calls_around, value_of

__all__ = ["to_node_data", "GRADIENT"]

#: Light to dark orange, readable under black text; stop 0 is the smallest value drawn.
GRADIENT = ({"stop": 0, "bgColor": "#fff5eb"}, {"stop": 0.5, "bgColor": "#fdae6b"},
            {"stop": 1, "bgColor": "#e6550d"})

# Attributes that are numbers but say nothing about a node's cost or behaviour.
_BOOKKEEPING = frozenset({"depth", "seq", "call_index", "version", "collapsed"})
# What a call holds as its module's, the same at every call of it (its parameters), not
# what the call did (FLOPs, times): counted at the module's first call, where its param
# nodes sit too, never again.
_PER_MODULE = frozenset({"params", "num_params", "trainable_params", "param_bytes"})


def _number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _numeric_names(graph: nx.DiGraph) -> list[str]:
    found = {key for _, attrs in graph.nodes(data=True) for key, value in attrs.items()
             if _number(value) and key not in _BOOKKEEPING}
    if any(value_of(attrs, "params") is not None for _, attrs in graph.nodes(data=True)):
        found.add("params")
    return sorted(found)


def _mark_calls(graph: nx.DiGraph, node: str, marked: set[str]) -> None:
    up = graph.nodes[node]["parent"]
    while up is not None and up not in marked:
        marked.add(up)
        up = graph.nodes[up]["parent"]


def _values(plan: Plan, data: str) -> dict[str, float]:
    """Each drawn node's value. A call drawn as a group (Model Explorer totals the nodes
    inside it) lends its value to the node inside it that produced its output, but only
    where no node inside has a value yet, innermost call first: a value recorded on calls
    only (a probe statistic) shows on the op that made the call's output, and an
    inclusive one is not counted twice. A module's parameters (``params``,
    ``num_params``...) are placed as :func:`_place_parameters` says."""
    graph = plan.graph
    read = {n: value_of(a, data) for n, a in graph.nodes(data=True) if plan.is_node(n)}
    values = {n: value for n, value in read.items() if value is not None}
    if data in _PER_MODULE:
        _place_parameters(plan, data, values)
        return values
    covered: set[str] = set()
    for node in values:
        _mark_calls(graph, node, covered)
    for call in sorted(plan.groups, key=lambda n: -graph.nodes[n]["depth"]):
        value = value_of(graph.nodes[call], data)
        if call in covered or value is None:
            continue
        found = _output_source(plan, call)
        if found is not None and found not in values and call in calls_around(graph, found):
            values[found] = value
            covered.add(call)
            _mark_calls(graph, call, covered)
    return values


def _place_parameters(plan: Plan, data: str, values: dict[str, float]) -> None:
    """Add to ``values`` what a module's parameters hold that no node inside its call holds
    yet (param nodes hold their own), at its first call, innermost call first: on a node
    drawn right in the call (the parameters of a module it never called, a weight read as
    ``F.linear(x, self.proj.weight)``), else on the one that made its output. A later call
    of a module adds nothing, and counts as holding its value in the calls around it (a
    module shared by an encoder and a decoder): every parameter is counted once, and Model
    Explorer's total at the top is the model's own."""
    graph = plan.graph
    held: dict[str, float] = {}  # call -> what the nodes inside it hold
    direct: dict[str, list[str]] = {}  # call -> the nodes drawn right in it, in order
    firsts = {attrs["qualname"]: node for node, attrs in graph.nodes(data=True)
              if attrs["kind"] == "layer" and attrs["call_index"] == 0}
    for node in sorted(values, key=lambda n: graph.nodes[n]["seq"]):
        if graph.nodes[node]["kind"] == "layer" and graph.nodes[node]["call_index"] > 0:
            _hold_again(graph, node, values.pop(node), held, firsts)  # not counted again
        else:
            _hold(graph, node, values[node], held)
    for node, attrs in sorted(graph.nodes(data=True), key=lambda item: item[1]["seq"]):
        if plan.is_node(node) and attrs["parent"] is not None:
            direct.setdefault(attrs["parent"], []).append(node)
    for call in sorted(plan.groups, key=lambda n: -graph.nodes[n]["depth"]):
        attrs = graph.nodes[call]
        value = value_of(attrs, data)
        if value is None:
            continue
        if attrs["call_index"] > 0:  # counted at the module's first call
            _hold_again(graph, call, value, held, firsts)
            continue
        rest = value - held.get(call, 0)
        if rest <= 0:
            continue
        target = _holder(plan, call, direct.get(call, []))
        if target is not None:
            values[target] = values.get(target, 0) + rest
            _hold(graph, target, rest, held)


def _hold(graph: nx.DiGraph, node: str, value: float, held: dict[str, float]) -> None:
    """Count ``value`` as held inside each call around ``node``."""
    for call in calls_around(graph, node):
        held[call] = held.get(call, 0) + value


def _hold_again(graph: nx.DiGraph, call: str, value: float, held: dict[str, float],
                firsts: dict[str, str]) -> None:
    """Count a later call's ``value`` as held in the calls around it that are not around
    its module's first call, which hold it through that call already (an encoder's and a
    decoder's shared embedding is held in each, and once in the model around both)."""
    first = firsts.get(graph.nodes[call]["qualname"])
    counted = set(calls_around(graph, first)) if first is not None else set()
    for outer in calls_around(graph, call):
        if outer not in counted:
            held[outer] = held.get(outer, 0) + value


def _holder(plan: Plan, call: str, direct: list[str]) -> Optional[str]:
    """The node a call's own parameters go on: the one that made its output where it is
    drawn right in the call, else the first op drawn there, else any node drawn there,
    else the one that made its output (in a call of its own)."""
    source = _output_source(plan, call)
    if source is not None and source in direct:
        return source
    ops = [n for n in direct if plan.graph.nodes[n]["kind"] == "op"]
    if ops or direct:
        return (ops or direct)[0]
    return source if source is not None and call in calls_around(plan.graph, source) else None


def _output_source(plan: Plan, call: str) -> Optional[str]:
    """The drawn node that a call's (first) output comes out of, if any."""
    outputs = [t for t in plan.graph.nodes[call].get("outputs", ()) if t in plan.graph]
    found = plan.source(outputs[0]) if outputs else None
    return None if found is None else found[0]


def to_node_data(graph: nx.DiGraph, *, data: str) -> str:
    """The node-data JSON that colours the graph of
    :func:`~torchgraphrec.export.model_explorer.to_model_explorer` by the numeric node
    attribute ``data`` (``"flops"``, ``"saved_bytes"``, ``"params"``, a probe statistic such
    as ``"grad_output.rms"``...), read as ``color_by`` reads it for a drawing.

    Model Explorer sums, averages and bounds the values inside each layer itself, so ops
    carry their own values; a value recorded only on module calls (a probe statistic)
    goes to the node inside the call that produced its output (see ``_values``).

    Raises:
        TypeError: ``data`` is not a non-empty string.
        ValueError: no node has a numeric ``data`` attribute (the message lists those
            that some node has).

    >>> g = nx.DiGraph(model="Tiny")
    >>> g.add_node("op:relu#0", kind="op", label="relu", parent=None, depth=0, seq=0,
    ...            name="relu", args="", grad_fn=None, t_start_ns=0, t_end_ns=0, flops=0)
    >>> json.loads(to_node_data(g, data="flops"))["Tiny"]["results"]
    {'op:relu#0': {'value': 0}}
    """
    if not isinstance(data, str) or not data:
        raise TypeError(f"data must be the name of a numeric node attribute, got {data!r}")
    values = _values(Plan(graph), data)
    if not values:
        raise ValueError(f"no node has a numeric {data!r} attribute (must be one of "
                         f"{_numeric_names(graph)})")
    document = {graph_id(graph): {
        "results": {node: {"value": value} for node, value in values.items()},
        "name": data, "thresholds": [], "gradient": list(GRADIENT),
        "hideInAggregatedStatsTable": False, "hideInChildrenStatsTable": False,
        "showExpandedSummaryOnGroupNode": False,
        "showLabelCountColumnsInChildrenStatsTable": False}}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
