"""Pure functions on recorded graphs: validate, collapse, and the JSON round trip.

Nothing here imports torch: a saved recording can be checked, folded and drawn without it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterator, Mapping, Optional

import networkx as nx

from torchgraphrec.errors import SchemaError
from torchgraphrec.schema import (
    COMMON_NODE_ATTRS,
    EDGE_ATTRS,
    GRAPH_ATTRS,
    NODE_ATTRS,
    OPTIONAL_EDGE_ATTRS,
    OPTIONAL_GRAPH_ATTRS,
    OPTIONAL_NODE_ATTRS,
    SCHEMA_VERSION,
    EdgeKind,
    NodeKind,
    TensorRole,
)

__all__ = ["validate", "collapse", "to_json", "from_json", "value_of", "calls_around",
           "backward_passes", "backward_ns"]

_FORMAT = "torchgraphrec.recording"


def _check_attrs(where: str, attrs: dict, rules: dict) -> None:
    for name, check in rules.items():
        if name not in attrs:
            raise SchemaError(f"{where}: missing attribute {name!r}")
        if not check(attrs[name]):
            raise SchemaError(f"{where}: attribute {name!r} has a bad value {attrs[name]!r}")


def _check_optional(where: str, attrs: dict, rules: dict) -> None:
    for name, check in rules.items():
        if name in attrs and not check(attrs[name]):
            raise SchemaError(f"{where}: attribute {name!r} has a bad value {attrs[name]!r}")


def _check_version(version: str) -> None:
    major = str(version).split(".")[0]
    ours = SCHEMA_VERSION.split(".")[0]
    if major == ours:
        return
    if major.isdigit() and ours.isdigit() and int(major) < int(ours):
        raise SchemaError(f"graph: schema_version {version!r} is older than this "
                          f"torchgraphrec's {SCHEMA_VERSION!r} (ops, names and settings were "
                          "added since); record the model again to read it")
    raise SchemaError(f"graph: schema_version {version!r} is not supported (this "
                      f"torchgraphrec reads {SCHEMA_VERSION!r}; a newer one may read it)")


def _check_node(graph: nx.DiGraph, node: Any, attrs: dict) -> None:
    where = f"node {node!r}"
    if not isinstance(node, str):
        raise SchemaError(f"{where}: node ids must be strings")
    kind = attrs.get("kind")
    if kind not in NODE_ATTRS:
        raise SchemaError(f"{where}: unknown kind {kind!r} (must be one of "
                          f"{[k.value for k in NodeKind]})")
    _check_attrs(where, attrs, COMMON_NODE_ATTRS)
    _check_attrs(where, attrs, NODE_ATTRS[kind])
    _check_optional(where, attrs, OPTIONAL_NODE_ATTRS[kind])
    if kind == NodeKind.TENSOR.value:
        _check_tensor_role(graph, where, node, attrs)
    parent = attrs["parent"]
    if parent is None:
        if attrs["depth"] != 0:
            raise SchemaError(f"{where}: depth must be 0 without a parent, got {attrs['depth']!r}")
        return
    parent_attrs = graph.nodes.get(parent)
    if parent_attrs is None or parent_attrs.get("kind") != NodeKind.LAYER.value:
        raise SchemaError(f"{where}: parent {parent!r} is not a layer node of the graph")
    if attrs["depth"] != parent_attrs.get("depth", -2) + 1:
        raise SchemaError(f"{where}: depth {attrs['depth']!r} is not its parent's depth + 1")


def _check_tensor_role(graph: nx.DiGraph, where: str, node: str, attrs: dict) -> None:
    role = attrs["role"]
    if role in (TensorRole.INPUT.value, TensorRole.OUTPUT.value) and "name" not in attrs:
        raise SchemaError(f"{where}: a model {role} must have a 'name'")
    if role == TensorRole.INPUT.value and attrs["parent"] is not None:
        raise SchemaError(f"{where}: a model input stands outside the model (parent None)")
    if role in (TensorRole.INPUT.value, TensorRole.CONSTANT.value) and graph.in_degree(node):
        raise SchemaError(f"{where}: a model {role} has no producer, but has incoming edges")


def _check_edge(graph: nx.DiGraph, source: Any, target: Any, attrs: dict) -> None:
    where = f"edge {source!r} -> {target!r}"
    if source == target:
        raise SchemaError(f"{where}: self-loops are not allowed")
    _check_attrs(where, attrs, EDGE_ATTRS)
    _check_optional(where, attrs, OPTIONAL_EDGE_ATTRS)
    from_param = graph.nodes[source]["kind"] == NodeKind.PARAM.value
    if from_param != (attrs["kind"] == EdgeKind.PARAM.value):
        raise SchemaError(f"{where}: kind must be 'param' exactly when the source is a param node")


def validate(graph: nx.DiGraph) -> None:
    """Check that ``graph`` follows the schema; raise :class:`SchemaError` if it does not.

    The error names the node or edge and the rule it breaks.

    >>> g = nx.DiGraph(schema_version=SCHEMA_VERSION, model="M", torch_version="2.13.0",
    ...                ops="torch")
    >>> g.add_node("op:relu#0", kind="op", label="relu", parent=None, depth=0, seq=0,
    ...            name="relu", grad_fn=None, args="")
    >>> validate(g)
    Traceback (most recent call last):
    torchgraphrec.errors.SchemaError: node 'op:relu#0': missing attribute 't_start_ns'
    """
    if not isinstance(graph, nx.DiGraph) or graph.is_multigraph():
        raise SchemaError(f"graph: must be a networkx.DiGraph, got {type(graph).__name__}")
    _check_attrs("graph", graph.graph, GRAPH_ATTRS)
    _check_optional("graph", graph.graph, OPTIONAL_GRAPH_ATTRS)
    _check_version(graph.graph["schema_version"])
    for node, attrs in graph.nodes(data=True):
        _check_node(graph, node, attrs)
    for source, target, attrs in graph.edges(data=True):
        _check_edge(graph, source, target, attrs)
    if not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        raise SchemaError(f"edges: data flow must be acyclic, found the cycle {cycle!r}")


def _representative(graph: nx.DiGraph, node: Any, depth: int, memo: dict) -> Any:
    chain = []
    while node not in memo and graph.nodes[node]["depth"] > depth:
        chain.append(node)
        node = graph.nodes[node]["parent"]
    found = memo.get(node, node)
    for folded in chain:
        memo[folded] = found
    return found


def collapse(graph: nx.DiGraph, depth: int) -> nx.DiGraph:
    """A new graph with every node deeper than ``depth`` folded into its ancestor layer.

    Edges are lifted to the nodes that stay; edges that would become self-loops are dropped
    and parallel ones merged, keeping the first one's attributes and a ``count``. Edges from
    a parameter folded away are dropped too: a parameter is not data flowing between calls
    (it hangs under its module's first call, and lifting its edges would invent a flow to
    the later calls). A layer that swallowed nodes gets ``collapsed`` (how many). The result
    follows the same schema.

    >>> g = nx.DiGraph(schema_version=SCHEMA_VERSION, model="M", torch_version="2.13.0",
    ...                ops="torch")
    >>> base = dict(label="", seq=0, t_start_ns=0, t_end_ns=0, num_params=0, call_index=0,
    ...             inputs=(), outputs=(), settings="", training=True)
    >>> g.add_node("layer:#0", kind="layer", parent=None, depth=0, qualname="", type="M", **base)
    >>> g.add_node("layer:a#0", kind="layer", parent="layer:#0", depth=1, qualname="a",
    ...            type="A", **base)
    >>> sorted(collapse(g, 0).nodes)
    ['layer:#0']
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be a whole number >= 0, got {depth!r}")
    memo: dict[Any, Any] = {}
    result = nx.DiGraph(**graph.graph)
    folded: dict[Any, int] = {}
    for node, attrs in graph.nodes(data=True):
        if attrs["depth"] <= depth:
            result.add_node(node, **attrs)
        else:
            keeper = _representative(graph, node, depth, memo)
            folded[keeper] = folded.get(keeper, 0) + 1
    for keeper, count in folded.items():
        result.nodes[keeper]["collapsed"] = count
    edges = sorted(graph.edges(data=True), key=lambda edge: edge[2]["seq"])
    for source, target, attrs in edges:
        if source not in result and graph.nodes[source]["kind"] == NodeKind.PARAM.value:
            continue
        source = _representative(graph, source, depth, memo)
        target = _representative(graph, target, depth, memo)
        if source == target:
            continue
        if result.has_edge(source, target):
            result.edges[source, target]["count"] += 1
            continue
        kind = (EdgeKind.PARAM if result.nodes[source]["kind"] == NodeKind.PARAM.value
                else EdgeKind.FLOW).value
        result.add_edge(source, target, **{**attrs, "kind": kind, "count": 1})
    return result


_CONTAINERS = (tuple, list, dict)


def _encode(value: Any) -> Any:
    # items are tested before the call: probe series hold many thousands of plain numbers
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(item) if isinstance(item, _CONTAINERS) else item
                              for item in value]}
    if isinstance(value, list):
        return [_encode(item) if isinstance(item, _CONTAINERS) else item for item in value]
    if isinstance(value, dict):
        return {str(key): _encode(item) if isinstance(item, _CONTAINERS) else item
                for key, item in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_decode(item) for item in value["__tuple__"])
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def to_json(graph: nx.DiGraph) -> str:
    """The graph as JSON text that :func:`from_json` turns back into an equal graph.

    Tuples are written as ``{"__tuple__": [...]}`` so that they come back as tuples.
    """
    document = {
        "format": _FORMAT,
        "graph": _encode(dict(graph.graph)),
        "nodes": [[node, _encode(attrs)] for node, attrs in graph.nodes(data=True)],
        "edges": [[s, t, _encode(attrs)] for s, t, attrs in graph.edges(data=True)],
    }
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def from_json(text: str | bytes, *, check: bool = True) -> nx.DiGraph:
    """The graph written by :func:`to_json`; with ``check``, also :func:`validate` it.

    Raises:
        SchemaError: the text is not JSON (a truncated file, say), not a torchgraphrec
            recording, from an unsupported schema version, or breaks the schema.
    """
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"recording: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise SchemaError(f"recording: not a torchgraphrec recording (expected a JSON object "
                          f"with format {_FORMAT!r})")
    try:
        graph = nx.DiGraph(**_decode(document["graph"]))
        graph.add_nodes_from((node, _decode(attrs)) for node, attrs in document["nodes"])
        graph.add_edges_from((s, t, _decode(attrs)) for s, t, attrs in document["edges"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"recording: malformed document ({exc!r})") from None
    if check:
        validate(graph)
    return graph


def value_of(attrs: Mapping[str, Any], name: str) -> Optional[float]:
    """The number ``name`` of a node, or ``None`` where it has none (an optional attribute
    not recorded, a value that is not a finite number). ``params`` is a layer's
    ``num_params`` and a param node's element count (a buffer's is ``None``: it holds no
    parameters, and ``num_params`` does not count it).

    >>> value_of({"kind": "param", "shape": (4, 8)}, "params"), value_of({"flops": 12}, "flops")
    (32, 12)
    >>> value_of({"flops": True}, "flops"), value_of({}, "forward_ms")
    (None, None)
    >>> value_of({"kind": "param", "shape": (4,), "buffer": True}, "params") is None
    True
    """
    if name == "params":
        if attrs.get("kind") == "param":
            return None if attrs.get("buffer") else math.prod(attrs["shape"])
        name = "num_params"
    value = attrs.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def calls_around(graph: nx.DiGraph, node: Any) -> Iterator[Any]:
    """The module calls ``node`` lies in, innermost first (its ``parent``, then that
    call's, up to a model call).

    >>> g = nx.DiGraph()
    >>> g.add_node("layer:#0", parent=None); g.add_node("layer:fc#0", parent="layer:#0")
    >>> g.add_node("op:linear#0", parent="layer:fc#0")
    >>> list(calls_around(g, "op:linear#0"))
    ['layer:fc#0', 'layer:#0']
    """
    parent = graph.nodes[node]["parent"]
    while parent is not None:
        yield parent
        parent = graph.nodes[parent]["parent"]


def backward_passes(attrs: Mapping[str, Any]) -> list[tuple[int, int]]:
    """Each backward pass through a node as ``(start, end)`` in ns: the pairs of its
    ``t_backward_spans_ns``, or its one pass; ``[]`` where no backward was recorded.

    >>> backward_passes({"t_backward_start_ns": 100, "t_backward_end_ns": 9000,
    ...                  "t_backward_spans_ns": (100, 400, 8000, 9000)})
    [(100, 400), (8000, 9000)]
    >>> backward_passes({"t_backward_start_ns": 5, "t_backward_end_ns": 9}), backward_passes({})
    ([(5, 9)], [])
    """
    spans = attrs.get("t_backward_spans_ns")
    if spans is not None:
        return list(zip(spans[::2], spans[1::2]))
    if "t_backward_start_ns" not in attrs:
        return []
    return [(attrs["t_backward_start_ns"], attrs["t_backward_end_ns"])]


def backward_ns(attrs: Mapping[str, Any]) -> int:
    """How long a node's backward ran: each of its :func:`backward_passes` from its start to
    its end, the time between passes (the user's code, another step's work) left out.

    >>> backward_ns({"t_backward_start_ns": 100, "t_backward_end_ns": 9000,
    ...              "t_backward_spans_ns": (100, 400, 8000, 9000)})
    1300
    """
    return sum(max(0, end - start) for start, end in backward_passes(attrs))
