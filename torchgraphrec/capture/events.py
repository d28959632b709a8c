"""The records the hooks and the walk append to while a model runs.

Every record carries its node's attribute dict in its final schema form, made once when
the node is first seen: building the graph then only links these dicts into networkx.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallRecord", "TensorRecord", "RawTensor", "OpRecord", "Events", "Attrs", "layer_id"]

Attrs = dict[str, Any]


def layer_id(qualname: str, call_index: int) -> str:
    """The node id of one module call.

    >>> layer_id("encoder.0", 1), layer_id("", 0)
    ('layer:encoder.0#1', 'layer:#0')
    """
    return f"layer:{qualname}#{call_index}"


class CallRecord:
    """One call of one module, as the hooks noted it.

    ``inputs`` and ``outputs`` are indices into :attr:`Events.tensors`. ``node_id`` and
    ``attrs`` (the layer node's attributes) are filled in by
    :meth:`~torchgraphrec.capture.hooks.CallTracker.describe_pending`, after the forward:
    work done inside the forward costs more, between layers whose compute evicts it from
    the caches.
    """

    __slots__ = ("module", "parent", "depth", "seq", "t_start", "seq_start", "t_end",
                 "seq_end", "inputs", "outputs", "node_id", "attrs")

    def __init__(self, module: int, parent: int, depth: int, seq: int, t_start: int,
                 seq_start: int, inputs: list[int]) -> None:
        self.module = module
        self.parent = parent
        self.depth = depth
        self.seq = seq
        self.t_start = self.t_end = t_start
        self.seq_start = self.seq_end = seq_start
        self.inputs = inputs
        self.outputs: list[int] = []
        self.node_id = ""
        self.attrs: Attrs = {}


class TensorRecord:
    """A tensor seen at a call boundary, as it was then: its node id and attributes, and
    what the walk needs besides.

    ``call`` is the index of the call that produced it (-1 for the model's inputs);
    ``grad_fn`` is dropped once the forward is walked, so that nothing is kept alive.
    The hooks note a :data:`RawTensor` tuple; the record is made from it after the forward.
    """

    __slots__ = ("node_id", "attrs", "call", "t", "grad_fn", "output_nr")

    def __init__(self, node_id: str, attrs: Attrs, call: int, t: int, grad_fn: Any,
                 output_nr: int) -> None:
        self.node_id = node_id
        self.attrs = attrs
        self.call = call
        self.t = t
        self.grad_fn = grad_fn
        self.output_nr = output_nr


#: What the hooks note of a tensor: ``(number, version, shape, dtype, device,
#: requires_grad, call, seq, t, grad_fn, output_nr)``. A tuple costs a fraction of an
#: object, and it is made between layers.
RawTensor = tuple[int, int, Any, Any, Any, bool, int, int, int, Any, int]


#: One autograd-recorded op: ``(node_id, attrs)``. A plain tuple: thousands are made per
#: forward.
OpRecord = tuple[str, Attrs]


@dataclass
class Events:
    """Everything one recorder observed, in observation order.

    Edges are ``(source, target, attributes)``. ``t0`` is the ``perf_counter_ns`` reading
    all ``*_ns`` attributes are relative to; ``seq`` the last observation number handed out.
    """

    calls: list[CallRecord] = field(default_factory=list)
    tensors: list[TensorRecord] = field(default_factory=list)
    ops: list[OpRecord] = field(default_factory=list)
    params: dict[str, Attrs] = field(default_factory=dict)  # by node id
    edges: list[tuple[str, str, Attrs]] = field(default_factory=list)
    seq: int = 0
    t0: int = 0
