"""The flat records the hooks append to while a model runs; no graph is built here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallRecord", "TensorRecord", "OpRecord", "ParamRecord", "EdgeRecord", "Events"]


class CallRecord:
    """One call of one module."""

    __slots__ = (
        "module", "call_index", "parent", "depth", "seq", "t_start", "t_end",
        "seq_start", "seq_end", "inputs", "outputs",
    )

    def __init__(self, module: int, call_index: int, parent: int, depth: int, seq: int,
                 t_start: int, seq_start: int) -> None:
        self.module = module
        self.call_index = call_index
        self.parent = parent
        self.depth = depth
        self.seq = seq
        self.t_start = t_start
        self.t_end = t_start
        self.seq_start = seq_start
        self.seq_end = seq_start
        self.inputs: list[int] = []
        self.outputs: list[int] = []


class TensorRecord:
    """A tensor seen at a call boundary, as it was then (shape, version, grad_fn)."""

    __slots__ = (
        "number", "version", "shape", "dtype", "device", "requires_grad", "parent", "seq",
        "t", "grad_fn", "output_nr", "role",
    )

    def __init__(self, number: int, version: int, tensor: Any, parent: int, seq: int,
                 t: int) -> None:
        self.number = number
        self.version = version
        self.shape = tuple(tensor.shape)
        self.dtype = str(tensor.dtype).replace("torch.", "")
        self.device = str(tensor.device)
        self.requires_grad = tensor.requires_grad
        self.parent = parent
        self.seq = seq
        self.t = t
        self.grad_fn = tensor.grad_fn  # dropped once the forward is walked
        self.output_nr = tensor.output_nr if self.grad_fn is not None else 0
        self.role = "intermediate"

    @property
    def node_id(self) -> str:
        return f"tensor:{self.number}@v{self.version}"


@dataclass
class OpRecord:
    """One autograd-recorded op, attributed to the call whose sequence window holds it."""

    node_id: str
    name: str
    grad_fn: str
    owner: int
    seq: int
    t: int


@dataclass
class ParamRecord:
    """A parameter that reached an op."""

    qualname: str
    shape: tuple[int, ...]
    dtype: str
    requires_grad: bool
    parent: int
    seq: int


@dataclass
class EdgeRecord:
    """A data-flow edge between two node ids."""

    source: str
    target: str
    kind: str
    seq: int
    t: int


@dataclass
class Events:
    """Everything one recorder observed, in observation order."""

    calls: list[CallRecord] = field(default_factory=list)
    tensors: list[TensorRecord] = field(default_factory=list)
    ops: list[OpRecord] = field(default_factory=list)
    params: dict[str, ParamRecord] = field(default_factory=dict)
    edges: list[EdgeRecord] = field(default_factory=list)
    seq: int = 0

    def next_seq(self) -> int:
        """Hand out the next observation number."""
        self.seq += 1
        return self.seq - 1
