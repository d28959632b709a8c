"""The graph schema: the one place where the recorded graph's vocabulary is written down.

A recording is a plain :class:`networkx.DiGraph`. Its shape is a public contract, kept
stable across releases and versioned by :data:`SCHEMA_VERSION`.

Graph attributes
    ``schema_version`` (str), ``model`` (the model's class qualname, str) and
    ``torch_version`` (str).

Nodes
    Every node has ``kind``, ``label`` (a short human label), ``parent``, ``depth`` and
    ``seq``:

    * ``kind`` is one of :class:`NodeKind`: ``layer``, ``tensor``, ``param`` or ``op``.
    * ``parent`` is the id of the enclosing ``layer`` node, or ``None``. For an ``op`` it is
      the module call that ran it; for a ``tensor`` the call that produced it (the model's
      inputs stand outside the model and have none); for a ``param`` the first call of the
      module that owns it (the first owner where weights are tied; the call that first used
      it where that module never ran). The root call has none.
    * ``depth`` is 0 where there is no parent, else the parent's depth + 1.
    * ``seq`` is the order in which the recorder observed the node (deterministic).

    ``layer``: one call of one module.
        ``qualname`` (from ``named_modules``, ``""`` for the root), ``type`` (class name),
        ``call_index`` (0, 1, ... per module), ``t_start_ns`` and ``t_end_ns`` (forward, in
        ns since the recording started), ``num_params`` (the module's parameter elements,
        nested ones included, counted when the graph is built; lazy parameters not yet
        materialized count 0), ``inputs`` and ``outputs`` (tuples of the ids of the tensor nodes the
        call received and returned; :func:`~torchgraphrec.collapse` keeps them as they were,
        so they may name tensors folded away).
    ``tensor``: a tensor at a module call's boundary (an input or output of some call).
        ``shape`` (tuple of int), ``dtype`` (e.g. ``"float32"``), ``device``,
        ``requires_grad``, ``role`` (one of :class:`TensorRole`: ``input`` for the model's
        inputs, ``output`` for its outputs, else ``intermediate``) and ``version`` (the
        tensor's in-place version counter: an in-place op makes a new node, never a cycle).
    ``param``: a parameter, one node however many calls use it.
        ``qualname`` (e.g. ``"encoder.0.weight"``), ``shape``, ``dtype``, ``requires_grad``,
        as they were when the recorded forward first used it.
    ``op``: one autograd-recorded operation.
        ``name`` (the forward op, e.g. ``"addmm"``) and ``grad_fn`` (e.g.
        ``"AddmmBackward0"``).

Edges
    Edges are data flow only, in execution direction (input tensor -> ops -> output tensor,
    param -> op), so they form a DAG; containment is the ``parent`` attribute, never an edge.
    Every edge has ``kind`` (one of :class:`EdgeKind`: ``param`` for an edge leaving a
    ``param`` node, else ``flow``), ``seq`` (global observation order, deterministic) and
    ``t_ns`` (ns since the recording started).

Ids
    Stable strings built from names and counters, never from ``id()``:
    ``layer:encoder.0#1`` (qualname and call index), ``param:encoder.0.weight``,
    ``op:addmm#17`` (op name and creation order), ``tensor:4@v1`` (tensor number and
    version). Two recordings of the same model and inputs give the same ids.

Values
    Every attribute value is a plain JSON-friendly value: str, int, float, bool, None or a
    tuple of int. The graph never holds a tensor, a module or a grad_fn. Nodes may carry
    further attributes (statistics, for instance); the ones above are always there.
"""

from __future__ import annotations

import enum
from typing import Callable, Mapping

__all__ = [
    "SCHEMA_VERSION",
    "NodeKind",
    "EdgeKind",
    "TensorRole",
    "COMMON_NODE_ATTRS",
    "NODE_ATTRS",
    "EDGE_ATTRS",
    "GRAPH_ATTRS",
]

SCHEMA_VERSION = "1.0"


class NodeKind(str, enum.Enum):
    """What a node stands for."""

    LAYER = "layer"
    TENSOR = "tensor"
    PARAM = "param"
    OP = "op"


class EdgeKind(str, enum.Enum):
    """What an edge carries."""

    FLOW = "flow"
    PARAM = "param"


class TensorRole(str, enum.Enum):
    """Where a tensor stands relative to the model."""

    INPUT = "input"
    OUTPUT = "output"
    INTERMEDIATE = "intermediate"


Check = Callable[[object], bool]


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return _is_int(value) and value >= 0  # type: ignore[operator]


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _is_optional_str(value: object) -> bool:
    return value is None or isinstance(value, str)


def _is_ids(value: object) -> bool:
    return isinstance(value, tuple) and all(isinstance(item, str) for item in value)


def _is_shape(value: object) -> bool:
    return isinstance(value, tuple) and all(_is_count(dim) for dim in value)


def _one_of(enum_type: type[enum.Enum]) -> Check:
    values = frozenset(member.value for member in enum_type)
    return lambda value: isinstance(value, str) and value in values


COMMON_NODE_ATTRS: Mapping[str, Check] = {
    "kind": _one_of(NodeKind),
    "label": _is_str,
    "parent": _is_optional_str,
    "depth": _is_count,
    "seq": _is_count,
}

NODE_ATTRS: Mapping[str, Mapping[str, Check]] = {
    NodeKind.LAYER.value: {
        "qualname": _is_str,
        "type": _is_str,
        "call_index": _is_count,
        "t_start_ns": _is_count,
        "t_end_ns": _is_count,
        "num_params": _is_count,
        "inputs": _is_ids,
        "outputs": _is_ids,
    },
    NodeKind.TENSOR.value: {
        "shape": _is_shape,
        "dtype": _is_str,
        "device": _is_str,
        "requires_grad": _is_bool,
        "role": _one_of(TensorRole),
        "version": _is_count,
    },
    NodeKind.PARAM.value: {
        "qualname": _is_str,
        "shape": _is_shape,
        "dtype": _is_str,
        "requires_grad": _is_bool,
    },
    NodeKind.OP.value: {
        "name": _is_str,
        "grad_fn": _is_str,
    },
}

EDGE_ATTRS: Mapping[str, Check] = {
    "kind": _one_of(EdgeKind),
    "seq": _is_count,
    "t_ns": _is_count,
}

GRAPH_ATTRS: Mapping[str, Check] = {
    "schema_version": _is_str,
    "model": _is_str,
    "torch_version": _is_str,
}
