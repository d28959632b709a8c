"""A DTensor and its local tensor joined by an op, ``to_local`` or ``from_local``, where one is the other's ``_local_tensor``."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from torchgraphrec._torch import autograd_sequence_number, dtensor_local, dtensor_type
from torchgraphrec.capture.events import OP_NUMBER
from torchgraphrec.capture.opnames import ALL_TENSORS, NO_KWARGS
from torchgraphrec.capture.values import ENTRY_REF, ENTRY_TENSOR

__all__ = ["ShardLinks", "has_dtensors", "move_pending"]

_PLAIN = torch.Tensor


def has_dtensors(tensors: Any) -> bool:
    """Whether any of ``tensors`` is a ``DTensor``.

    >>> has_dtensors([torch.zeros(1)])
    False
    """
    found = dtensor_type()
    return found is not None and any(isinstance(tensor, found) for tensor in tensors)


def move_pending(tables: list[dict[int, int]], index: int) -> None:
    """Move what ``tables`` (op index -> count) hold for ``index`` to ``index + 1``: the
    counts of the op about to be recorded, once an op was put in before it.

    >>> table = {3: 10}
    >>> move_pending([table], 3); table
    {4: 10}
    """
    for table in tables:
        count = table.pop(index, None)
        if count is not None:
            table[index + 1] = table.get(index + 1, 0) + count


class ShardLinks:
    """Puts a ``to_local`` op between a ``DTensor`` and its local tensor where an op or a
    call reads the local tensor the recorder has not seen made, and a ``from_local`` op
    between a local tensor and a ``DTensor`` built on it.

    Neither is a torch function (``DTensor.to_local`` and ``DTensor.from_local`` run
    autograd Functions whose only op, ``view_as``, reads the DTensor's ``_local_tensor``),
    so the op mode sees the local tensor appear from nowhere. The link is the tensor object
    itself, never a guess: the local tensor is the DTensor's ``_local_tensor``.

    Args:
        values: the capture's :class:`~torchgraphrec.capture.values.Values` (the state
            that holds these links is not held back: no cycle with it).
        events: the capture's :class:`~torchgraphrec.capture.events.Events`.
        active: whether DTensors are about already (the model has DTensor parameters);
            a DTensor read later turns the search for local tensors on.
        on_insert: called with the index of each op put in, before the op mode appends the
            op it is recording (whose costs, counted under that index, must follow it).
    """

    __slots__ = ("values", "events", "dtensor", "active", "inserted", "on_insert")

    def __init__(self, values: Any, events: Any, active: bool,
                 on_insert: Callable[[int], None]) -> None:
        self.values, self.events = values, events
        self.dtensor = dtensor_type()
        self.active = active
        self.inserted: list[int] = []
        self.on_insert = on_insert

    def link(self, tensor: torch.Tensor, version: int, call: int, t: int) -> Optional[int]:
        """The index of a new ``to_local``/``from_local`` op producing ``tensor`` (now its
        producer in the forward's values), or ``None`` where ``tensor`` is no such link."""
        found = self.dtensor
        if found is None:
            return None
        if isinstance(tensor, found):
            self.active = True
            source: Any = dtensor_local(tensor)
            name = "from_local"
        elif self.active and type(tensor) is _PLAIN:
            source, name = self._dtensor_of(tensor), "to_local"
        else:
            return None
        entry = self.values.lookup(source) if source is not None else None
        if entry is None:
            return None
        return self._add(name, entry[ENTRY_REF], tensor, version, call, t)

    def _dtensor_of(self, tensor: torch.Tensor) -> Any:
        """The DTensor of the forward whose local tensor ``tensor`` is, or ``None``."""
        found = self.dtensor
        for entry in self.values.current.values():
            held = entry[ENTRY_TENSOR]()
            if type(held) is not _PLAIN and isinstance(held, found) and \
                    dtensor_local(held) is tensor:
                return held
        return None

    def _add(self, name: str, ref: Any, tensor: torch.Tensor, version: int, call: int,
             t: int) -> int:
        events = self.events
        index = len(events.ops)
        seq = events.seq + 1
        events.seq = seq + 1  # the op, then its one in-edge (as the op mode numbers them)
        self.on_insert(index)
        # laid out as the op mode's records (events.RawOp): no grad_fn of its own, since
        # autograd's node for to_local is the one its view_as makes
        events.ops.append((name, call, seq, t, t, [ref], ALL_TENSORS[1], NO_KWARGS, tensor.shape,
                           tensor.dtype, None, autograd_sequence_number(), t, None))
        self.inserted.append(index)
        self.values.set(tensor, version, index, None)
        return index

    def settle(self) -> None:
        """Give each op put in while another was being recorded that op's autograd number
        (it made no autograd node, and an op owns the nodes numbered from its own number
        up to the next op's): called when a forward ends."""
        ops = self.events.ops
        for index in reversed(self.inserted):  # the last first: two may stand in a row
            if index + 1 < len(ops) and ops[index + 1][OP_NUMBER] < ops[index][OP_NUMBER]:
                record = ops[index]
                ops[index] = record[:OP_NUMBER] + (ops[index + 1][OP_NUMBER],) + \
                    record[OP_NUMBER + 1:]
        self.inserted = []
