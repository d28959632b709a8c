"""The graph schema: the one place where the recorded graph's vocabulary is written down.

A recording is a plain :class:`networkx.DiGraph`. Its shape is a public contract, kept
stable across releases and versioned by :data:`SCHEMA_VERSION` (a new major version may
rename or drop attributes; a new minor version only adds).

Graph attributes
    ``schema_version`` (str), ``model`` (the model's class qualname, str),
    ``torch_version`` (str) and ``ops`` (how ops were recorded, one of :class:`OpsMode`:
    ``torch`` for every torch-level call the forward made, ``autograd`` for the nodes
    autograd recorded, ``none`` for module calls and boundary tensors only).

Nodes
    Every node has ``kind``, ``label`` (a short human label), ``parent``, ``depth`` and
    ``seq``:

    * ``kind`` is one of :class:`NodeKind`: ``layer``, ``tensor``, ``param`` or ``op``.
    * ``parent`` is the id of the enclosing ``layer`` node, or ``None``. For an ``op`` it is
      the module call that ran it; for a ``tensor`` the call that produced it (the model's
      inputs stand outside the model and have none; a constant hangs under the call that
      first used it); for a ``param`` the first call of the module that owns it (the first
      owner where weights are tied; the call that first used it where that module never
      ran). The root call has none.
    * ``depth`` is 0 where there is no parent, else the parent's depth + 1.
    * ``seq`` is the order in which the recorder observed the node (deterministic).

    ``layer``: one call of one module.
        ``qualname`` (from ``named_modules``, ``""`` for the root), ``type`` (class name),
        ``call_index`` (0, 1, ... per module), ``t_start_ns`` and ``t_end_ns`` (forward, in
        ns since the recording started, on a clock that stops while the recorder works),
        ``num_params`` (the module's parameter elements,
        nested ones included, counted when the graph is built; lazy parameters not yet
        materialized count 0; a parameter several modules hold, a tied weight, counts only
        in the one ``named_parameters()`` names it under, and those above it), ``inputs`` and ``outputs`` (tuples of the ids of the nodes
        the call received, positional and keyword, and returned: tensor nodes, and param
        nodes for parameters handed over as arguments; :func:`~torchgraphrec.collapse`
        keeps them as they were, so they may name nodes folded away), ``settings`` (the
        module's ``extra_repr()`` on one line, ``""`` where it has none, e.g.
        ``"in_features=8, out_features=16, bias=True"``) and ``training`` (the module's
        ``training`` flag during the call).
    ``tensor``: a tensor value at a call's boundary, or one the model used as it was.
        A tensor value at a module call's boundary (an input or output of some call), or
        one the model used without receiving or computing it (a constant). ``shape`` (tuple of int), ``dtype`` (e.g. ``"float32"``), ``device``,
        ``requires_grad``, ``role`` (one of :class:`TensorRole`) and ``version`` (the
        tensor's in-place version counter: an in-place op makes a new node, never a cycle).
        Inputs and outputs also have ``name``: for an input the ``forward`` parameter it
        was bound to (``"input_ids"``, ``"args[2]"`` for ``*args``, the key for
        ``**kwargs``, with the path inside a container: ``"batch['ids']"``), for an output
        its path in what the model returned (``"output"``, ``"output[0]"``,
        ``"output['logits']"``, ``"output.logits"``; a tensor returned at several paths is
        one node, named by the first). A nested tensor has ``nested``
        (``True``), and its ``shape`` holds the leading dimensions that are regular.
    ``param``: a parameter or buffer, one node however many calls use it.
        ``qualname`` (e.g. ``"encoder.0.weight"``), ``shape``, ``dtype``,
        ``requires_grad`` and ``buffer`` (``True`` for a registered buffer such as a
        BatchNorm's ``running_mean``), as they were when the forward first used it.
    ``op``: one operation the forward ran.
        ``name`` (with ``ops="torch"`` what the model's code called, dunders dropped:
        ``"linear"``, ``"conv2d"``, ``"add"`` for ``x + y``, ``"getitem"`` for ``x[i]``,
        ``"setitem"`` for ``x[i] = v``; with ``ops="autograd"`` the forward op autograd
        names, e.g. ``"addmm"``), ``grad_fn`` (autograd's node class for its result, e.g.
        ``"AddmmBackward0"``, or ``None`` where autograd recorded none: under ``no_grad``,
        on integer results, for frozen inputs), ``args`` (a short text of its non-tensor
        arguments, at most 60 characters: ``"dim=1"``, ``"(2, 8, -1)"``),
        ``t_start_ns`` and ``t_end_ns`` (inside its call's interval). With
        ``ops="torch"`` also ``shape`` and ``dtype`` of its first tensor result (for an
        in-place op, the tensor it changed; for a ``backward`` run inside the forward, an op
        whose FLOPs are that backward's, the tensor it started from).

    Calls that only read metadata (``.size()``, ``.shape``, ``.dim()``, ``.dtype``) are
    not ops, and calls made inside another op's implementation are part of that op. A call
    that hands back one of its arguments as it was (``dropout`` in eval mode,
    ``contiguous`` on a contiguous tensor, ``x.to(x.dtype)``) made nothing and is no op:
    what reads its result reads the argument's producer.

Edges
    Edges are data flow only, in execution direction, so they form a DAG; containment is
    the ``parent`` attribute, never an edge. Each one is a dependency the recorder saw:
    a tensor or param that an op received (tensor -> op, param -> op, op -> op), an op's
    result at a call boundary (op -> tensor). With ``ops="none"`` there are no ops: edges
    then run tensor -> layer for what a call received and layer -> tensor for what it
    produced. A model output that the forward returned just as it came in (an input, a
    parameter, a constant, an earlier forward's output) is an output node of its own, fed
    by the node it was (tensor -> tensor, param -> tensor); a tensor returned at several
    paths is one node, named by the first. Every edge has ``kind`` (one of :class:`EdgeKind`: ``param`` for an edge
    leaving a ``param`` node, else ``flow``), ``seq`` (global observation order,
    deterministic; sorted by it, ``t_ns`` never decreases) and ``t_ns`` (ns since the
    recording started). Where an op was given one source more than once (``x * x``, one
    tensor as attention's query, key and value), its one edge from that source stands for
    each, and every edge into that op has ``positions``: the argument positions (a tuple of
    int, counting its tensor arguments and parameters in the order given) it stands for.

Ids
    Stable strings built from names and counters, never from ``id()``:
    ``layer:encoder.0#1`` (qualname and call index), ``param:encoder.0.weight``,
    ``op:linear#17`` (op name and creation order), ``tensor:4@v1`` (tensor number and
    version). Two recordings of the same model and inputs give the same ids.

Values
    Every attribute value is a plain JSON-friendly value: str, int, float, bool, None or a
    tuple of int. The graph never holds a tensor, a module or a grad_fn. Nodes may carry
    further attributes; the optional ones below are checked where present:

    * ``t_backward_start_ns`` / ``t_backward_end_ns`` on ops and layers: when autograd
      started and finished their backward (recorded with ``backward=True``); where more
      than one backward pass ran through a node (``retain_graph=True``, a gradient
      penalty's pass through a ``create_graph=True`` gradient), ``t_backward_spans_ns``:
      each pass's start and end in turn (a tuple of int), and ``backward_ms`` their sum.
    * ``collapsed`` on layers and ``count`` on edges: written by
      :func:`~torchgraphrec.collapse`.

Distributed
    Under ``torch.distributed`` (a process group initialized when the recording began) the
    graph has ``rank``, ``world_size`` and ``dist_backend`` (absent otherwise; not
    ``backend``, a keyword networkx keeps for itself). The backward's collectives (DDP's
    bucket all-reduce, FSDP2's re-gathers and reduce-scatters, tensor parallel's) are op
    nodes with ``phase="backward"`` (label ``"<collective> (backward)"``, ``args`` the
    dispatcher's op, no edges: they move gradients, which are not nodes), parented by the
    top-level call where a parameter's gradient accumulator or the final callbacks ran them
    (DDP's reducer, FSDP2's root), else by the call whose output gradient arrived last
    before each started; where the recorder cannot watch a backward (``ops`` other than
    ``"torch"``), the graph has ``backward_collectives``: ``"not seen: <why>"``. On a torch
    whose ``torch.distributed`` does not dispatch torch functions (torch 2.4)
    ``collectives``: ``"without data flow: <why>"``. A collective's op node (``all_reduce``,
    ``broadcast``, the functional collectives...) has ``collective`` (one of ``all_reduce``, ``all_gather``,
    ``reduce_scatter``, ``broadcast``, ``all_to_all``, ``reduce``, ``gather``, ``scatter``,
    ``send``, ``recv``), ``group_name`` (str), ``group_ranks`` (tuple of the group's global
    ranks), ``comm_bytes`` (int: the bytes of the tensors this rank hands to it; for
    ``recv``, and ``scatter`` off its source, the buffer it receives into), ``phase``
    (``"forward"`` or ``"backward"``) and ``coll_seq`` (its place among this rank's
    collectives in that group during the recording, from 0). An in-place collective
    makes a new value of the tensor it writes (a new tensor number: collectives leave the
    version counter as it was), and later readers read that value. A param node of a
    sharded parameter (a ``DTensor``: tensor parallel, FSDP2) keeps the global ``shape`` and
    has ``local_shape`` (this rank's), ``placements`` (tuple of ``repr(placement)``, e.g.
    ``"Shard(dim=0)"``) and ``bytes`` of this rank's shard. A tensor node of a ``DTensor``
    (tensor parallel's activations) has the global ``shape``, ``local_shape`` and
    ``placements`` too.

Costs
    What running the model cost, on ops and layer calls (a layer's numbers include
    everything inside it), where recorded:

    * ``flops`` and ``backward_flops`` (int): floating-point operations by PyTorch's own
      formulas (``torch.utils.flop_counter``): what ``FlopCounterMode`` counts for the ATen
      ops each op ran, with ``flops=True``; attention counts the same whichever kernel ran
      (the fused kernels it has no formula for count as their unfused matmuls), a grouped
      matmul as its groups' matmuls, a grouped convolution's backward as its groups'
      (docs/costs.rst). The graph attributes of the same names hold the model's totals.
    * ``saved_bytes`` (int): the bytes autograd saved for the backward while it ran (each
      storage once, at its full size, a sparse tensor's indices and values; the storages of
      parameters and of the model's inputs not counted), with ``memory=True``, in grad mode:
      a ``Recorder``'s forward under ``no_grad`` has none on its ops and calls. The graph
      attribute holds the total: all the forward saved (what a training step keeps until
      its backward, but for a branch whose graph the forward itself dropped).
    * ``forward_ms`` and ``self_ms`` (float): the recorded forward's time, inclusive, and
      excluding the calls and ops inside; ``backward_ms`` (float) where a backward was
      recorded. Times leave the recorder's own work out: an op's is its call alone, a
      layer call's its ops' and the Python between them (every time is read from a clock
      that stops while the recorder works, see "Times" in the docs). The graph attribute
      ``plain_forward_ms`` (float), where present, is the same forward timed without a
      recorder, by whoever timed it (the recorder never runs a model twice: a second
      forward would move BatchNorm statistics and the random state); reports show it
      beside the recorded time.
    * ``bytes`` (int) on tensor and param nodes: ``numel`` times the element size;
      ``output_bytes`` and ``param_bytes`` (int) on layers: what a call returned, and its
      module's parameters (nested ones included); ``trainable_params`` (int) on layers: the
      elements of ``num_params`` that require grad.
"""

from __future__ import annotations

import enum
from typing import Callable, Mapping

__all__ = [
    "SCHEMA_VERSION",
    "NodeKind",
    "EdgeKind",
    "TensorRole",
    "OpsMode",
    "COMMON_NODE_ATTRS",
    "NODE_ATTRS",
    "EDGE_ATTRS",
    "GRAPH_ATTRS",
    "OPTIONAL_NODE_ATTRS",
    "OPTIONAL_EDGE_ATTRS",
    "OPTIONAL_GRAPH_ATTRS",
]

SCHEMA_VERSION = "2.1"


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
    """Where a tensor stands relative to the model: ``input`` (the model received it),
    ``output`` (the model returned it), ``constant`` (the model used it without receiving
    or computing it: a plain tensor attribute, a global, a closure) or ``intermediate``."""

    INPUT = "input"
    OUTPUT = "output"
    INTERMEDIATE = "intermediate"
    CONSTANT = "constant"


class OpsMode(str, enum.Enum):
    """How a recording's ops were observed (the graph attribute ``ops``)."""

    TORCH = "torch"
    AUTOGRAD = "autograd"
    NONE = "none"


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
        "settings": _is_str,
        "training": _is_bool,
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
        "buffer": _is_bool,
    },
    NodeKind.OP.value: {
        "name": _is_str,
        "grad_fn": _is_optional_str,
        "args": _is_str,
        "t_start_ns": _is_count,
        "t_end_ns": _is_count,
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
    "ops": _one_of(OpsMode),
}

_BACKWARD_TIMES: Mapping[str, Check] = {
    "t_backward_start_ns": _is_count,
    "t_backward_end_ns": _is_count,
    "t_backward_spans_ns": lambda value: _is_shape(value) and len(value) % 2 == 0,
}

def _is_ms(value: object) -> bool:
    return isinstance(value, float) and value >= 0


_COSTS: Mapping[str, Check] = {
    "flops": _is_count, "backward_flops": _is_count, "saved_bytes": _is_count,
    "forward_ms": _is_ms, "self_ms": _is_ms, "backward_ms": _is_ms,
}

#: A collective's op attributes (under torch.distributed).
_COLLECTIVE: Mapping[str, Check] = {
    "collective": _is_str, "group_name": _is_str, "group_ranks": _is_shape,
    "comm_bytes": _is_count, "phase": lambda value: value in ("forward", "backward"),
    "coll_seq": _is_count,
}

#: Attributes a node may have, by kind, checked where present.
OPTIONAL_NODE_ATTRS: Mapping[str, Mapping[str, Check]] = {
    NodeKind.LAYER.value: {**_BACKWARD_TIMES, **_COSTS, "collapsed": _is_count,
                           "output_bytes": _is_count, "param_bytes": _is_count,
                           "trainable_params": _is_count},
    NodeKind.TENSOR.value: {"name": _is_str, "nested": _is_bool, "bytes": _is_count,
                            "local_shape": _is_shape, "placements": _is_ids},
    NodeKind.PARAM.value: {"bytes": _is_count, "local_shape": _is_shape, "placements": _is_ids},
    NodeKind.OP.value: {**_BACKWARD_TIMES, **_COSTS, "shape": _is_shape, "dtype": _is_str,
                        **_COLLECTIVE},
}

#: Graph attributes that may be present, checked where present: the model's cost totals
#: and a forward timed without the recorder.
OPTIONAL_GRAPH_ATTRS: Mapping[str, Check] = {
    "flops": _is_count, "backward_flops": _is_count, "saved_bytes": _is_count,
    "plain_forward_ms": _is_ms,
    "rank": _is_count, "world_size": _is_count, "dist_backend": _is_str,
    "backward_collectives": _is_str,
    "collectives": _is_str,
}

#: Attributes an edge may have, checked where present.
OPTIONAL_EDGE_ATTRS: Mapping[str, Check] = {"count": _is_count, "positions": _is_shape}
