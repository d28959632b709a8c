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


def layer_id(qualname: str, call_index: int) -> str:
    """The node id of one module call.

    >>> layer_id("encoder.0", 1), layer_id("", 0)
    ('layer:encoder.0#1', 'layer:#0')
    """
    return f"layer:{qualname}#{call_index}"


def build_graph(events: Events, table: ModuleTable) -> nx.DiGraph:
    """A graph in the schema of :mod:`torchgraphrec.schema` from ``events``."""
    graph = nx.DiGraph(
        schema_version=SCHEMA_VERSION,
        model=type(table.model).__qualname__,
        torch_version=str(torch.__version__),
    )
    layer_ids = [layer_id(table.qualnames[c.module], c.call_index) for c in events.calls]
    nodes: list[tuple[str, dict[str, Any]]] = []
    nodes += _layer_nodes(events, table, layer_ids)
    nodes += _tensor_nodes(events, layer_ids)
    nodes += _param_nodes(events, layer_ids)
    nodes += _op_nodes(events, layer_ids)
    nodes.sort(key=lambda item: item[1]["seq"])
    graph.add_nodes_from(nodes)
    if graph.number_of_nodes() != len(nodes):
        raise CaptureError(f"the recorder made {len(nodes)} nodes but only "
                           f"{graph.number_of_nodes()} distinct ids")
    graph.add_edges_from(
        (e.source, e.target, {"kind": e.kind, "seq": e.seq, "t_ns": e.t}) for e in events.edges)
    return graph


def _placement(parent: int, layer_ids: list[str], events: Events) -> tuple[str | None, int]:
    if parent < 0:
        return None, 0
    return layer_ids[parent], events.calls[parent].depth + 1


def _layer_nodes(events: Events, table: ModuleTable, layer_ids: list[str]) -> list:
    nodes = []
    for call, node_id in zip(events.calls, layer_ids):
        qualname, type_name = table.qualnames[call.module], table.types[call.module]
        parent = layer_ids[call.parent] if call.parent >= 0 else None
        nodes.append((node_id, {
            "kind": "layer", "label": f"{qualname}: {type_name}" if qualname else type_name,
            "parent": parent, "depth": call.depth, "seq": call.seq,
            "qualname": qualname, "type": type_name, "call_index": call.call_index,
            "t_start_ns": call.t_start, "t_end_ns": call.t_end,
            "num_params": table.num_params(call.module),
        }))
    return nodes


def _tensor_nodes(events: Events, layer_ids: list[str]) -> list:
    nodes = []
    for record in events.tensors:
        parent, depth = _placement(record.parent, layer_ids, events)
        nodes.append((record.node_id, {
            "kind": "tensor", "label": str(record.shape), "parent": parent, "depth": depth,
            "seq": record.seq, "shape": record.shape, "dtype": record.dtype,
            "device": record.device, "requires_grad": record.requires_grad,
            "role": record.role, "version": record.version,
        }))
    return nodes


def _param_nodes(events: Events, layer_ids: list[str]) -> list:
    nodes = []
    for record in events.params.values():
        parent, depth = _placement(record.parent, layer_ids, events)
        nodes.append((f"param:{record.qualname}", {
            "kind": "param", "label": record.qualname, "parent": parent, "depth": depth,
            "seq": record.seq, "qualname": record.qualname, "shape": record.shape,
            "dtype": record.dtype, "requires_grad": record.requires_grad,
        }))
    return nodes


def _op_nodes(events: Events, layer_ids: list[str]) -> list:
    nodes = []
    for record in events.ops:
        parent, depth = _placement(record.owner, layer_ids, events)
        nodes.append((record.node_id, {
            "kind": "op", "label": record.name, "parent": parent, "depth": depth,
            "seq": record.seq, "name": record.name, "grad_fn": record.grad_fn,
        }))
    return nodes
