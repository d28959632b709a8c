"""The records the hooks and the op mode append to while a model runs.

Inside the forward only raw facts are noted, as tuples and small slotted records: work done
between layers costs several times its microbenchmark, since each layer's compute leaves the
caches cold. Ids and attribute dicts are made in one pass when a forward ends
(:mod:`~torchgraphrec.capture.naming`).

A *ref* names what produced a value: an ``int >= 0`` is an op (its index in
:attr:`Events.ops`), an ``int < 0`` a tensor node (``~index`` into :attr:`Events.tensors`),
a ``str`` a param node id.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Union

__all__ = [
    "Ref", "CallRecord", "RawTensor", "RawOp", "Events", "Attrs", "layer_id", "raw_tensor",
    "TENSOR_NUMBER", "TENSOR_VERSION", "TENSOR_SHAPE", "TENSOR_DTYPE", "TENSOR_DEVICE",
    "TENSOR_REQUIRES_GRAD", "TENSOR_CALL", "TENSOR_SEQ", "TENSOR_T", "TENSOR_GRAD_FN",
    "TENSOR_OUTPUT_NR", "OP_NAME", "OP_CALL", "OP_SEQ", "OP_T_START", "OP_T_END", "OP_REFS",
    "OP_ARGS", "OP_KWARGS", "OP_SHAPE", "OP_DTYPE", "OP_GRAD_FN", "OP_NUMBER", "OP_T_EDGES",
    "OP_FUNC",
]

Attrs = dict[str, Any]
Ref = Union[int, str]
#: The attrs of a call not named yet (read-only: shared by every such call).
_UNNAMED: Attrs = MappingProxyType({})  # type: ignore[assignment]


def layer_id(qualname: str, call_index: int) -> str:
    """The node id of one module call.

    >>> layer_id("encoder.0", 1), layer_id("", 0)
    ('layer:encoder.0#1', 'layer:#0')
    """
    return f"layer:{qualname}#{call_index}"


class CallRecord:
    """One call of one module, as the hooks noted it.

    ``inputs`` and ``outputs`` are refs (tensor or param nodes); ``node_id`` and ``attrs``
    are filled in after the forward. ``seq_start``/``seq_end`` are autograd's sequence
    numbers at the call's start and end (the autograd view places ops by them).
    """

    __slots__ = ("module", "parent", "depth", "seq", "t_start", "t_end", "seq_start",
                 "seq_end", "inputs", "outputs", "training", "node_id", "attrs")

    def __init__(self, module: int, parent: int, depth: int, seq: int, t_start: int,
                 seq_start: int, training: bool, inputs: list[Ref]) -> None:
        self.module = module
        self.parent = parent
        self.depth = depth
        self.seq = seq
        self.t_start = self.t_end = t_start
        self.seq_start = self.seq_end = seq_start
        self.inputs = inputs
        # no containers made per call only to be replaced: the post-hook sets the outputs
        # (none where the forward raised), naming the attrs
        self.outputs: Sequence[Ref] = ()
        self.training = training
        self.node_id = ""
        self.attrs: Attrs = _UNNAMED


#: A tensor node as noted at a call boundary (or at the first use of a constant), a tuple
#: read through the ``TENSOR_*`` indices below: ``call`` is the call that produced it (-1:
#: none), ``grad_fn`` and ``output_nr`` are kept for the autograd view only (``None`` and 0
#: otherwise). Built by :func:`raw_tensor` alone.
RawTensor = tuple[int, int, Any, Any, Any, bool, int, int, int, Any, int]
(TENSOR_NUMBER, TENSOR_VERSION, TENSOR_SHAPE, TENSOR_DTYPE, TENSOR_DEVICE,
 TENSOR_REQUIRES_GRAD, TENSOR_CALL, TENSOR_SEQ, TENSOR_T, TENSOR_GRAD_FN,
 TENSOR_OUTPUT_NR) = range(11)

#: An op as the op mode noted it, a tuple read through the ``OP_*`` indices below (plain
#: indices into a tuple: a record built per op must cost no more than the tuple). ``refs``
#: are the producers of its tensor arguments, in order; its in-edges take the sequence
#: numbers right after its own, at ``t_edges``. ``grad_fn`` is the class name of
#: autograd's node for its first result (or ``None``); ``number`` was autograd's next
#: sequence number when it started. ``args`` and ``kwargs`` may be tuples and a dict that many
#: records share (``opnames.ALL_TENSORS``, ``opnames.NO_KWARGS``): never written to. Built by
#: the op handler (:meth:`~torchgraphrec.capture.ops.OpRecorder.record`) and, for the op it
#: puts in, :class:`~torchgraphrec.capture.shardlinks.ShardLinks`, in this order.
RawOp = tuple[str, int, int, int, int, list, tuple, Any, Any, Any, Any, int, int, Any]
(OP_NAME, OP_CALL, OP_SEQ, OP_T_START, OP_T_END, OP_REFS, OP_ARGS, OP_KWARGS, OP_SHAPE,
 OP_DTYPE, OP_GRAD_FN, OP_NUMBER, OP_T_EDGES, OP_FUNC) = range(14)


def raw_tensor(number: int, version: int, shape: Any, dtype: Any, device: Any,
               requires_grad: bool, call: int, seq: int, t: int, grad_fn: Any = None,
               output_nr: int = 0) -> RawTensor:
    """The one place a :data:`RawTensor` is laid out (a version of -1, an inference
    tensor's, is noted as 0).

    >>> record = raw_tensor(7, -1, (2, 3), "float32", "cpu", False, 0, 5, 100)
    >>> record[TENSOR_NUMBER], record[TENSOR_VERSION], record[TENSOR_SEQ], record[TENSOR_GRAD_FN]
    (7, 0, 5, None)
    """
    return (number, version if version > 0 else 0, shape, dtype, device, requires_grad, call,
            seq, t, grad_fn, output_nr)


class Events:
    """Everything one recorder observed, in observation order.

    ``seq`` is the last observation number handed out and ``t0`` the ``perf_counter_ns``
    reading all ``*_ns`` attributes are relative to. ``roles`` and ``names`` hold what is
    known of a tensor node beyond its raw tuple (model inputs, outputs and constants).
    ``boundary_edges`` are ``(source ref, target ref, seq, t)``. ``nodes`` and ``edges`` are
    the named nodes and edges, in schema form, of the forwards finished so far.
    """

    __slots__ = ("calls", "tensors", "ops", "params", "boundary_edges", "roles", "names",
                 "seq", "t0", "nodes", "edges")

    def __init__(self) -> None:
        self.calls: list[CallRecord] = []
        self.tensors: list[RawTensor] = []
        self.ops: list[RawOp] = []
        #: param node id -> (first call, seq, shape, dtype, requires_grad) at its first use
        self.params: dict[str, tuple[int, int, Any, Any, bool]] = {}
        self.boundary_edges: list[tuple[Ref, Ref, int, int]] = []
        self.roles: dict[int, str] = {}  # tensor index -> role, where not intermediate
        self.names: dict[int, str] = {}  # tensor index -> name, for inputs and outputs
        self.seq = 0
        self.t0 = 0
        self.nodes: list[tuple[str, Attrs]] = []
        self.edges: list[tuple[str, str, Attrs]] = []

    def next_seq(self) -> int:
        """A new observation number."""
        self.seq += 1
        return self.seq
