"""Model Explorer's graph JSON (a GraphCollection) from a recording, its layers nested by module."""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional

import networkx as nx

from torchgraphrec.export.plan import Plan, graph_id
from torchgraphrec.export.times import span
from torchgraphrec.graph import backward_ns
from torchgraphrec.text import dims_text, shape_text

__all__ = ["to_model_explorer", "attribute_text"]

# Attributes that say where a node sits or when it ran, shown another way or not at all.
_HIDDEN = frozenset({"kind", "label", "parent", "depth", "seq", "inputs", "outputs",
                     "probe_series", "t_start_ns", "t_end_ns", "t_backward_start_ns",
                     "t_backward_end_ns", "t_backward_spans_ns", "collapsed"})
_FIRST = {
    "op": ("name", "args", "shape", "dtype", "grad_fn"),
    "param": ("qualname", "shape", "dtype", "requires_grad", "buffer"),
    "tensor": ("name", "role", "shape", "dtype", "device", "requires_grad"),
    "layer": ("type", "qualname", "call_index", "settings", "training", "num_params"),
}
#: The times written from a node's stamps, each with its stamps: the costs pass stores the
#: same times unrounded under these names, which are not written again.
_TIMES = (("forward_ms", "t_start_ns", "t_end_ns"),
          ("backward_ms", "t_backward_start_ns", "t_backward_end_ns"))
_TIMED = frozenset(key for key, _, _ in _TIMES)


def attribute_text(value: Any) -> str:
    """An attribute value as Model Explorer shows it (its values are text).

    >>> attribute_text((3, 16)), attribute_text(0.000123456789), attribute_text(None)
    ('(3, 16)', '0.000123457', 'None')
    """
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _milliseconds(attrs: dict, start: str, end: str) -> Optional[str]:
    times = span(attrs, start, end)  # None: not recorded (a backward may not have been)
    if times is None:
        return None
    if start == "t_backward_start_ns":  # the passes' own times, without the time between
        return f"{backward_ns(attrs) / 1e6:.3f}"
    return f"{(times[1] - times[0]) / 1e6:.3f}"  # 0.000 for autograd's instants


def _shapes(graph: nx.DiGraph, ids: Iterable[str]) -> str:
    return ", ".join(shape_text(graph.nodes[n]["shape"]) for n in ids if n in graph)


def _attributes(graph: nx.DiGraph, node: str) -> list[dict]:
    """Key/value pairs for the side panel: what the node is first, then times, then the
    rest (costs, probe statistics) by name; each key once.

    >>> g = nx.DiGraph()
    >>> g.add_node("op:relu#0", kind="op", name="relu", args="", t_start_ns=0,
    ...            t_end_ns=1_500_000, forward_ms=1.5, flops=96)
    >>> [(item["key"], item["value"]) for item in _attributes(g, "op:relu#0")]
    [('name', 'relu'), ('forward_ms', '1.500'), ('flops', '96')]
    """
    attrs = graph.nodes[node]
    first = [k for k in _FIRST[attrs["kind"]] if k in attrs and attrs[k] not in ("", None)]
    pairs = [(k, attribute_text(attrs[k])) for k in first]
    if attrs["kind"] == "layer":
        pairs += [(side, _shapes(graph, attrs.get(side, ()))) for side in ("inputs", "outputs")]
    for key, start, end in _TIMES:
        time = _milliseconds(attrs, start, end)
        pairs += [(key, time)] if time is not None else []
    rest = sorted(k for k in attrs
                  if k not in _HIDDEN and k not in _TIMED and k not in _FIRST[attrs["kind"]])
    pairs += [(k, attribute_text(attrs[k])) for k in rest]
    return [{"key": key, "value": value} for key, value in pairs]


def _tensor_item(index: int, attrs: dict, name: str) -> dict:
    return {"id": str(index), "attrs": [
        {"key": "tensor_shape", "value": f"{attrs['dtype']}[{dims_text(attrs['shape'], ', ')}]"},
        {"key": "tensor_name", "value": name}]}


def _outputs(plan: Plan, node: str) -> list[dict]:
    graph = plan.graph
    tensors = plan.outputs.get(node)
    if tensors:
        return [_tensor_item(i, graph.nodes[t], t) for i, t in enumerate(tensors)]
    attrs = graph.nodes[node]
    if attrs["kind"] == "layer":
        return []
    if "shape" in attrs and "dtype" in attrs:
        return [_tensor_item(0, attrs, node)]  # its own (first) result
    # an autograd node read without its result's shape: still the output its edges leave
    return [{"id": "0", "attrs": [{"key": "tensor_name", "value": node}]}]


def _incoming(plan: Plan, sources: Iterable[str]) -> tuple[list[dict], list[dict]]:
    edges: list[dict] = []
    tags: list[dict] = []
    seen = set()
    for source in sources:
        found = plan.source(source)
        if found is None or found in seen:
            continue  # a group's own edges: the nodes inside it carry them
        seen.add(found)
        if plan.graph.nodes[source]["kind"] == "param":
            tag = plan.graph.nodes[source]["qualname"].rpartition(".")[2]
            tags.append({"id": str(len(edges)), "attrs": [{"key": "__tensor_tag", "value": tag}]})
        edges.append({"sourceNodeId": found[0], "sourceNodeOutputId": str(found[1]),
                      "targetNodeInputId": str(len(edges))})
    return edges, tags


def _node(node_id: str, label: str, namespace: str, wiring: tuple, outputs: list,
          attrs: list) -> dict:
    """One GraphNode, every field of Model Explorer's dataclass present. No node is
    pinned to its layer's top (``config.pinToGroupTop``): Model Explorer keeps one pinned
    node per layer, leaves pinned nodes and the edges inside the layer out of the layout
    (a pinned weight would lose its edge to the op that reads it, its bias not), and does
    not lay out at all one outside any layer. Params are laid out as other nodes are."""
    return {"id": node_id, "label": label, "namespace": namespace, "subgraphIds": [],
            "attrs": attrs, "incomingEdges": wiring[0], "outputsMetadata": outputs,
            "inputsMetadata": wiring[1], "style": None, "config": None}


def _label(plan: Plan, node: str, attrs: dict) -> str:
    kind = attrs["kind"]
    if kind == "op":
        return attrs["name"]
    if kind == "param":
        return attrs["qualname"].rpartition(".")[2]
    if kind == "layer":
        return plan.names[node]
    if attrs.get("name"):
        return attrs["name"]  # a model input
    return f"{attrs['role']} {shape_text(attrs['shape'])}"  # a constant, or no op made it


def _sources(graph: nx.DiGraph, node: str, attrs: dict) -> list[str]:
    if attrs["kind"] == "layer" and attrs.get("inputs"):
        return [n for n in attrs["inputs"] if n in graph]  # a call drawn whole: what it took
    return sorted(graph.predecessors(node), key=lambda s: graph.edges[s, node]["seq"])


def _nodes(plan: Plan) -> list[dict]:
    graph = plan.graph
    found = []
    for node, attrs in sorted(graph.nodes(data=True), key=lambda item: item[1]["seq"]):
        if plan.is_node(node):
            found.append(_node(node, _label(plan, node, attrs), plan.namespace(node),
                               _incoming(plan, _sources(graph, node, attrs)),
                               _outputs(plan, node), _attributes(graph, node)))
    for node, attrs in sorted(graph.nodes(data=True), key=lambda item: item[1]["seq"]):
        if attrs["kind"] == "tensor" and attrs["role"] == "output":
            found.append(_node(f"output:{node}", attrs.get("name", "output"), "",
                               _incoming(plan, [node]), [], _attributes(graph, node)))
    return found


def _group_attributes(plan: Plan) -> dict[str, dict[str, str]]:
    """The side panel of each group; ``""`` is the graph's own (and a left-out root call's)."""
    graph = plan.graph
    groups: dict[str, dict[str, str]] = {"": {key: attribute_text(value) for key, value
                                              in sorted(graph.graph.items())}}
    for node in sorted(plan.groups, key=lambda n: graph.nodes[n]["seq"]):
        pairs = {item["key"]: item["value"] for item in _attributes(graph, node)}
        groups.setdefault(plan.paths[node], {}).update(pairs)
    return groups


def to_model_explorer(graph: nx.DiGraph) -> str:
    """The recording as Model Explorer's graph JSON: a GraphCollection holding one Graph.

    Each module call that holds ops or other calls is a layer (its ``namespace`` is the
    path of calls, so expanding a layer shows its ops); ops, params, inputs and calls
    holding nothing are nodes; a tensor at a call boundary is the edge out of the node
    that made it, its shape and dtype in ``outputsMetadata`` (see
    :class:`~torchgraphrec.export.plan.Plan`).

    >>> g = nx.DiGraph(model="Tiny")
    >>> g.add_node("op:relu#0", kind="op", label="relu", parent=None, depth=0, seq=0,
    ...            name="relu", args="", grad_fn=None, t_start_ns=0, t_end_ns=0)
    >>> document = json.loads(to_model_explorer(g))
    >>> document["label"], [node["label"] for node in document["graphs"][0]["nodes"]]
    ('Tiny', ['relu'])
    """
    plan = Plan(graph)
    model = graph_id(graph)
    document = {"label": model, "graphs": [{
        "id": model, "nodes": _nodes(plan), "groupNodeAttributes": _group_attributes(plan),
        "groupNodeConfigs": None, "nodeLabelsToHide": None, "tasksData": None,
        "layoutConfigs": None}], "graphSorting": "node_count_desc"}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
