"""The flat records the hooks append to while a model runs; no graph is built here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["CallRecord", "TensorRecord", "OpRecord", "ParamRecord", "Events"]


class CallRecord:
    """One call of one module; ``call_index`` and ``depth`` are derived when the graph is built."""

    __slots__ = ("module", "parent", "seq", "t_start", "seq_start", "t_end", "seq_end",
                 "inputs", "outputs")

    def __init__(self, module: int, parent: int, seq: int, t_start: int, seq_start: int,
                 inputs: list[int]) -> None:
        self.module = module
        self.parent = parent
        self.seq = seq
        self.t_start = self.t_end = t_start
        self.seq_start = self.seq_end = seq_start
        self.inputs = inputs
        self.outputs: list[int] = []


class TensorRecord:
    """A tensor seen at a call boundary, as it was then; values are turned into plain
    strings and tuples only when the graph is built, to keep the hooks cheap."""

    __slots__ = ("node_id", "version", "shape", "dtype", "device", "requires_grad", "parent",
                 "seq", "t", "grad_fn", "output_nr", "role")

    def __init__(self, number: int, version: int, tensor: Any, parent: int, seq: int,
                 t: int) -> None:
        self.node_id = f"tensor:{number}@v{version}"
        self.version = version
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.device = tensor.device
        self.requires_grad = tensor.requires_grad
        self.parent = parent
        self.seq = seq
        self.t = t
        self.grad_fn = grad_fn = tensor.grad_fn  # dropped once the forward is walked
        self.output_nr = tensor.output_nr if grad_fn is not None else 0
        self.role = "intermediate"


#: One autograd-recorded op, attributed to the call whose sequence window holds it:
#: ``(node_id, name, grad_fn, owner_call, seq, t)``. A plain tuple: thousands are made per
#: forward, and a class's ``__init__`` would cost more than the rest of the work.
OpRecord = tuple[str, str, str, int, int, int]


class ParamRecord(NamedTuple):
    """A parameter that reached an op; its shape and dtype are read when the graph is built
    (the model holds the parameter anyway)."""

    qualname: str
    param: Any
    parent: int
    seq: int


@dataclass
class Events:
    """Everything one recorder observed, in observation order.

    Edges are ``(source, target, attributes)``, their ``t_ns`` already relative to ``t0``;
    other times are ``perf_counter_ns`` readings, made relative to ``t0`` when the graph is
    built.
    """

    calls: list[CallRecord] = field(default_factory=list)
    tensors: list[TensorRecord] = field(default_factory=list)
    ops: list[OpRecord] = field(default_factory=list)
    params: dict[str, ParamRecord] = field(default_factory=dict)
    edges: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    seq: int = 0
    t0: int = 0

    def next_seq(self) -> int:
        """Hand out the next observation number."""
        self.seq += 1
        return self.seq
