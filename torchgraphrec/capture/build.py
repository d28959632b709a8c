"""Building the networkx graph once, in bulk, from a recorder's flat records."""

from __future__ import annotations

from typing import Any

import networkx as nx
import torch

from torchgraphrec.capture.events import Events
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.errors import CaptureError
from torchgraphrec.schema import SCHEMA_VERSION

__all__ = ["build_graph", "layer_id"]

Node = tuple[str, dict[str, Any]]


def layer_id(qualname: str, call_index: int) -> str:
    """The node id of one module call.

    >>> layer_id("encoder.0", 1), layer_id("", 0)
    ('layer:encoder.0#1', 'layer:#0')
    """
    return f"layer:{qualname}#{call_index}"


class _Names:
    """Plain strings for dtypes and devices, each converted once."""

    def __init__(self) -> None:
        self._cache: dict[Any, str] = {}

    def __call__(self, value: Any) -> str:
        name = self._cache.get(value)
        if name is None:
            name = self._cache[value] = str(value).replace("torch.", "")
        return name


def build_graph(events: Events, table: ModuleTable) -> nx.DiGraph:
    """A graph in the schema of :mod:`torchgraphrec.schema` from ``events``."""
    graph = nx.DiGraph(
        schema_version=SCHEMA_VERSION,
        model=type(table.model).__qualname__,
        torch_version=str(torch.__version__),
    )
    layers = _layer_nodes(events, table, [record.node_id for record in events.tensors])
    places = [(node_id, attrs["depth"] + 1) for node_id, attrs in layers]
    nodes = layers + _tensor_nodes(events, places) + _param_nodes(events, places)
    nodes += _op_nodes(events, places)
    _fill(graph, nodes, events)
    return graph


def _fill(graph: nx.DiGraph, nodes: list[Node], events: Events) -> None:
    # Writing networkx's own adjacency dicts directly is several times faster than
    # add_nodes_from/add_edges_from, and the result is the same plain DiGraph.
    node_store, succ, pred = graph._node, graph._succ, graph._pred
    for node_id, attrs in nodes:
        node_store[node_id] = attrs
        succ[node_id] = {}
        pred[node_id] = {}
    if len(node_store) != len(nodes):
        raise CaptureError(f"the recorder made {len(nodes)} nodes but only "
                           f"{len(node_store)} distinct ids")
    try:
        for source, target, attrs in events.edges:
            succ[source][target] = pred[target][source] = attrs
    except KeyError as exc:
        raise CaptureError(f"the recorder made an edge to an unknown node {exc}") from None


def _layer_nodes(events: Events, table: ModuleTable, tensor_ids: list[str]) -> list[Node]:
    nodes: list[Node] = []
    counts: dict[int, int] = {}
    t0 = events.t0
    num_params = table.all_num_params()
    for call in events.calls:
        call_index = counts.get(call.module, 0)
        counts[call.module] = call_index + 1
        qualname, type_name = table.qualnames[call.module], table.types[call.module]
        parent, depth = (nodes[call.parent][0], nodes[call.parent][1]["depth"] + 1) \
            if call.parent >= 0 else (None, 0)
        nodes.append((layer_id(qualname, call_index), {
            "kind": "layer", "label": f"{qualname}: {type_name}" if qualname else type_name,
            "parent": parent, "depth": depth, "seq": call.seq,
            "qualname": qualname, "type": type_name, "call_index": call_index,
            "t_start_ns": call.t_start - t0, "t_end_ns": call.t_end - t0,
            "num_params": num_params[call.module],
            "inputs": _unique_ids(call.inputs, tensor_ids),
            "outputs": _unique_ids(call.outputs, tensor_ids),
        }))
    return nodes


def _unique_ids(indices: list[int], tensor_ids: list[str]) -> tuple[str, ...]:
    if len(indices) == 1:
        return (tensor_ids[indices[0]],)
    return tuple(dict.fromkeys([tensor_ids[i] for i in indices]))


def _tensor_nodes(events: Events, places: list[tuple[str, int]]) -> list[Node]:
    nodes: list[Node] = []
    name, t0 = _Names(), events.t0
    for record in events.tensors:
        parent, depth = places[record.parent] if record.parent >= 0 else (None, 0)
        shape = tuple(record.shape)
        nodes.append((record.node_id, {
            "kind": "tensor", "label": str(shape), "parent": parent, "depth": depth,
            "seq": record.seq, "shape": shape, "dtype": name(record.dtype),
            "device": name(record.device), "requires_grad": record.requires_grad,
            "role": record.role, "version": record.version,
        }))
    return nodes


def _param_nodes(events: Events, places: list[tuple[str, int]]) -> list[Node]:
    nodes: list[Node] = []
    name = _Names()
    for record in events.params.values():
        parent, depth = places[record.parent] if record.parent >= 0 else (None, 0)
        param = record.param
        nodes.append((f"param:{record.qualname}", {
            "kind": "param", "label": record.qualname, "parent": parent, "depth": depth,
            "seq": record.seq, "qualname": record.qualname, "shape": tuple(param.shape),
            "dtype": name(param.dtype), "requires_grad": param.requires_grad,
        }))
    return nodes


def _op_nodes(events: Events, places: list[tuple[str, int]]) -> list[Node]:
    nodes: list[Node] = []
    for node_id, name, grad_fn, owner, seq, _ in events.ops:
        parent, depth = places[owner] if owner >= 0 else (None, 0)
        nodes.append((node_id, {
            "kind": "op", "label": name, "parent": parent, "depth": depth,
            "seq": seq, "name": name, "grad_fn": grad_fn,
        }))
    return nodes
