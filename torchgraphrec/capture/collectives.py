"""Collectives as ops: torch.distributed calls that return no tensor and bump no version.

The op handler asks :func:`collective_call` only on its rare path (a call that returned no
tensor and changed none); the functional collectives return tensors and are recorded as any
op, and :class:`ForwardCollectives` reads both kinds' attributes from their process groups
while these exist, for the graphs built later. Nothing here communicates: group names and
ranks are what the local process group knows.
"""

from __future__ import annotations

import inspect
from math import prod
from typing import Any, Optional, Sequence

import networkx as nx
import torch

from torchgraphrec._torch import is_functional_collective, resolve_process_group
from torchgraphrec.capture.events import OP_T_START

__all__ = ["C10D", "FUNCTIONAL", "collective_call", "ForwardCollectives", "group_attrs", "ranks_of"]

_C10D_MODULE = "torch.distributed.distributed_c10d"

_ONE = lambda size: 1.0  # noqa: E731 - table entries
_PER_RANK = lambda size: 1.0 / size  # noqa: E731
_ALL_RANKS = lambda size: float(size)  # noqa: E731

#: torch.distributed's functions: ``name -> (collective, parameter written, parameter read,
#: bytes handed over per byte of the op's first tensor as a function of the group's size)``;
#: the op's first tensor is the first one it writes, else the first it reads (the first it
#: reads for those in :data:`_DESCRIBED_BY_INPUT`).
C10D: dict[str, tuple[str, Optional[str], str, Any]] = {
    "all_reduce": ("all_reduce", "tensor", "tensor", _ONE),
    "all_reduce_coalesced": ("all_reduce", "tensors", "tensors", _ONE),
    "broadcast": ("broadcast", "tensor", "tensor", _ONE),
    "reduce": ("reduce", "tensor", "tensor", _ONE),
    "all_gather": ("all_gather", "tensor_list", "tensor", _ONE),
    "all_gather_into_tensor": ("all_gather", "output_tensor", "input_tensor", _PER_RANK),
    "all_gather_single": ("all_gather", "output_tensor", "input_tensor", _PER_RANK),
    "_all_gather_base": ("all_gather", "output_tensor", "input_tensor", _PER_RANK),
    "reduce_scatter": ("reduce_scatter", "output", "input_list", _ALL_RANKS),
    "reduce_scatter_tensor": ("reduce_scatter", "output", "input", _ALL_RANKS),
    "reduce_scatter_single": ("reduce_scatter", "output", "input", _ALL_RANKS),
    "_reduce_scatter_base": ("reduce_scatter", "output", "input", _ALL_RANKS),
    "all_gather_coalesced": ("all_gather", "output_tensor_lists", "input_tensor_list", _ONE),
    "all_to_all_single": ("all_to_all", "output", "input", _ONE),
    "all_to_all": ("all_to_all", "output_tensor_list", "input_tensor_list", _ALL_RANKS),
    "gather": ("gather", "gather_list", "tensor", _ONE),
    "scatter": ("scatter", "tensor", "scatter_list", _ONE),
    "send": ("send", None, "tensor", _ONE),
    "isend": ("send", None, "tensor", _ONE),
    "recv": ("recv", "tensor", "tensor", _ONE),
    "irecv": ("recv", "tensor", "tensor", _ONE),
}

#: The functional collectives (``torch.distributed._functional_collectives``, which return
#: a new tensor): ``name -> (collective, bytes handed over per byte returned, as a
#: function of the group's size)``.
FUNCTIONAL: dict[str, tuple[str, Any]] = {
    "all_reduce": ("all_reduce", _ONE),
    "all_reduce_": ("all_reduce", _ONE),
    "broadcast": ("broadcast", _ONE),
    "broadcast_": ("broadcast", _ONE),
    "all_gather_into_tensor": ("all_gather", _PER_RANK),
    "all_gather_into_tensor_out": ("all_gather", _PER_RANK),
    "reduce_scatter_tensor": ("reduce_scatter", _ALL_RANKS),
    "all_to_all_single": ("all_to_all", _ONE),
}


#: Where what a rank receives need not be the size of what it hands over (uneven splits):
#: the op is described by, and its bytes read from, the tensor it reads.
_DESCRIBED_BY_INPUT = frozenset({"all_to_all_single"})


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value``: itself, or those of a list, or of a list of lists
    (``all_gather_coalesced``'s outputs)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in _tensors(item)]
    return []


def group_attrs(group: Any) -> dict[str, Any]:
    """``group_name`` and ``group_ranks`` of a process group (``None``: the default one)."""
    import torch.distributed as dist

    if group is None:
        group = dist.group.WORLD
    found: dict[str, Any] = {"group_name": str(getattr(group, "group_name", ""))}
    try:
        found["group_ranks"] = tuple(int(r) for r in dist.get_process_group_ranks(group))
    except (RuntimeError, ValueError, AttributeError, LookupError):  # destroyed, say
        found["group_ranks"] = ()
    return found


def _bound(func: Any, args: Any, kwargs: dict) -> Optional[dict[str, Any]]:
    try:
        return dict(inspect.signature(func).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return None


def collective_call(mode: Any, func: Any, name: str, args: tuple, kwargs: dict
                    ) -> tuple[Optional[list], Any]:
    """For a call the op handler saw return no tensor and change none: where it is a
    torch.distributed collective, ``(changed, first)``, the tensors it wrote (each at
    version -1: a new value the version counter does not show) and the tensor its op node
    describes; ``(None, None)`` for any other call."""
    entry = C10D.get(name)
    if entry is None or getattr(func, "__module__", "") != _C10D_MODULE:
        return None, None
    bound = _bound(func, args, kwargs)
    if bound is None:
        return None, None
    writes = _tensors(bound.get(entry[1])) if entry[1] else []
    reads = _tensors(bound.get(entry[2]))
    described = (reads or writes) if name in _DESCRIBED_BY_INPUT else (writes or reads)
    first = described[0] if described else None
    return ([(tensor, -1) for tensor in writes] or None), first


def _attrs(record: tuple) -> Optional[dict[str, Any]]:
    """A collective's attributes from its op record (tensors there are marks: its bytes are
    its first tensor's, scaled), or ``None`` for any other op."""
    name, func = record[0], record[13]
    if name in C10D and getattr(func, "__module__", "") == _C10D_MODULE:
        collective, _, _, per_byte = C10D[name]
        bound = _bound(func, record[6], record[7] or {})
        attrs = {"collective": collective, **group_attrs((bound or {}).get("group"))}
    elif name in FUNCTIONAL and is_functional_collective(func):
        collective, per_byte = FUNCTIONAL[name]
        names = [value for value in record[6] if isinstance(value, str)]
        attrs = {"collective": collective, "group_name": names[-1] if names else "",
                 "group_ranks": ranks_of(names[-1]) if names else ()}
    else:
        return None
    size = len(attrs["group_ranks"]) or 1
    first = prod(int(d) for d in record[8]) * record[9].itemsize
    attrs["comm_bytes"] = int(first * per_byte(size))
    return attrs


def ranks_of(group_name: str) -> tuple[int, ...]:
    import torch.distributed as dist

    try:
        return tuple(int(r) for r in dist.get_process_group_ranks(
            resolve_process_group(group_name)))
    except (RuntimeError, ValueError, AttributeError, LookupError):
        return ()


class ForwardCollectives:
    """The attributes of a recording's forward collectives, each read from its process group
    once: a graph built after the groups are destroyed (at the end of a job, where a
    recording is read) still has them."""

    def __init__(self) -> None:
        #: op index -> (start, attributes)
        self.found: dict[int, tuple[int, dict[str, Any]]] = {}
        self._read = 0  # the ops before this index are read

    def read(self, ops: list) -> None:
        """Read the collectives among ``ops`` not read yet, where torch.distributed is
        initialized (elsewhere their groups are not known: they are read later)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        for index in range(self._read, len(ops)):
            record = ops[index]
            if record[0] in C10D or record[0] in FUNCTIONAL:
                attrs = _attrs(record)
                if attrs is not None:
                    self.found[index] = (record[OP_T_START], attrs)
        self._read = len(ops)

    def annotate(self, graph: nx.DiGraph, op_ids: list[str],
                 backward: Sequence[tuple[int, str]] = ()) -> None:
        """Give the collectives' op nodes ``collective``, ``group_name``, ``group_ranks``,
        ``comm_bytes`` and ``phase``, and number each group's collectives in the order they
        started (``coll_seq``, from 0), the ``backward`` ones (``(start, node id)``, their
        nodes already annotated) among them."""
        started = list(backward)
        for index, (start, attrs) in self.found.items():
            node = graph.nodes.get(op_ids[index]) if index < len(op_ids) else None
            if node is not None:
                node.update(attrs, phase="forward")
                started.append((start, op_ids[index]))
        numbers: dict[str, int] = {}
        for _, node_id in sorted(started, key=lambda pair: pair[0]):
            node = graph.nodes[node_id]
            node["coll_seq"] = numbers.get(node["group_name"], 0)
            numbers[node["group_name"]] = node["coll_seq"] + 1
