"""Building the networkx graph once, in bulk, from a recorder's named records."""

from __future__ import annotations

import networkx as nx
import torch

from torchgraphrec.capture.events import Attrs, Events
from torchgraphrec.capture.naming import Namer
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.errors import CaptureError
from torchgraphrec.schema import SCHEMA_VERSION

__all__ = ["build_graph"]


def build_graph(events: Events, table: ModuleTable, namer: Namer, ops: str, *,
                share: bool = False) -> nx.DiGraph:
    """A graph in the schema of :mod:`torchgraphrec.schema` from the named records.

    Layers get their ``num_params`` now (lazy modules have their parameters only after a
    forward) and param nodes their attributes (a parameter is described as it is now,
    which is as the forward used it unless it changed since). With ``share`` the graph
    takes the records' dicts as they are (for a recording built once), otherwise copies,
    so that a graph handed out earlier never changes when the recorder records on.
    """
    graph = nx.DiGraph(schema_version=SCHEMA_VERSION, model=type(table.model).__qualname__,
                       torch_version=str(torch.__version__), ops=ops)
    # a forward still running (the graph read from a hook) has unnamed calls: the graph
    # shows the forwards finished so far
    calls = [call for call in events.calls if call.node_id]
    num_params, param_bytes, trainable = table.param_totals() if calls else ([], [], [])
    for call in calls:
        call.attrs["num_params"] = num_params[call.module]
        call.attrs["param_bytes"] = param_bytes[call.module]
        call.attrs["trainable_params"] = trainable[call.module]
    nodes = [(call.node_id, call.attrs) for call in calls]
    nodes += events.nodes
    nodes += namer.param_nodes()
    _fill(graph, nodes, events.edges, share)
    return graph


def _fill(graph: nx.DiGraph, nodes: list[tuple[str, Attrs]],
          edges: list[tuple[str, str, Attrs]], share: bool) -> None:
    # Writing networkx's own adjacency dicts directly is several times faster than
    # add_nodes_from/add_edges_from, and the result is the same plain DiGraph
    # (tests/capture pin the internals this relies on).
    node_store, succ, pred = graph._node, graph._succ, graph._pred
    if not share:
        nodes = [(node_id, attrs.copy()) for node_id, attrs in nodes]
        edges = [(source, target, attrs.copy()) for source, target, attrs in edges]
    node_store.update(nodes)
    if len(node_store) != len(nodes):
        raise CaptureError(f"the recorder made {len(nodes)} nodes but only "
                           f"{len(node_store)} distinct ids")
    succ.update({node_id: {} for node_id in node_store})
    pred.update({node_id: {} for node_id in node_store})
    try:
        for source, target, attrs in edges:
            if target in succ[source]:
                continue  # one edge per pair: the first observation stands
            succ[source][target] = pred[target][source] = attrs
    except KeyError as exc:
        raise CaptureError(f"the recorder made an edge to an unknown node {exc}") from None
