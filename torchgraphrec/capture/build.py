"""Building the networkx graph once, in bulk, from a recorder's records."""

from __future__ import annotations

import networkx as nx
import torch

from torchgraphrec.capture.events import Attrs, Events
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.errors import CaptureError
from torchgraphrec.schema import SCHEMA_VERSION

__all__ = ["build_graph"]


def build_graph(events: Events, table: ModuleTable, *, share: bool = False) -> nx.DiGraph:
    """A graph in the schema of :mod:`torchgraphrec.schema` from ``events``.

    The records already hold every node's attributes but the layers' ``num_params``,
    counted now (lazy modules have their parameters only after a forward). With ``share``
    the graph takes the records' dicts as they are (for a recording built once), otherwise
    it gets copies, so that a graph handed out earlier never changes when the recorder
    records on.
    """
    graph = nx.DiGraph(
        schema_version=SCHEMA_VERSION,
        model=type(table.model).__qualname__,
        torch_version=str(torch.__version__),
        ops="autograd",
    )
    _fill(graph, _nodes(events, table.all_num_params() if events.calls else []), events, share)
    return graph


def _nodes(events: Events, num_params: list[int]) -> list[tuple[str, Attrs]]:
    # A forward still running (the graph read from inside a hook) has calls without ids
    # yet; the graph then shows every forward finished so far.
    calls = [call for call in events.calls if call.node_id]
    for call in calls:
        call.attrs["num_params"] = num_params[call.module]
    nodes = [(call.node_id, call.attrs) for call in calls]
    nodes += [(record.node_id, record.attrs) for record in events.tensors]
    nodes += events.params.items()
    nodes += events.ops
    return nodes


def _fill(graph: nx.DiGraph, nodes: list[tuple[str, Attrs]], events: Events,
          share: bool) -> None:
    # Writing networkx's own adjacency dicts directly is several times faster than
    # add_nodes_from/add_edges_from, and the result is the same plain DiGraph.
    node_store, succ, pred = graph._node, graph._succ, graph._pred
    edges = events.edges
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
            succ[source][target] = pred[target][source] = attrs
    except KeyError as exc:
        raise CaptureError(f"the recorder made an edge to an unknown node {exc}") from None
