"""When reading an op's ``grad_fn`` is safe: never in an autograd chain longer than MAX_CHAIN."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from torchgraphrec.capture import autograd
from torchgraphrec.capture.events import OP_NUMBER, OP_REFS

__all__ = ["ChainGuard"]


class ChainGuard:
    """Follows how long a chain of autograd nodes can end in each op's result.

    Once Python has touched the nodes of a chain longer than ``autograd.MAX_CHAIN``, PyTorch
    crashes when it frees them (pytorch/pytorch#109948), and reading ``tensor.grad_fn``
    touches one. No chain can be longer than the number of nodes autograd made since the
    forward began, so nothing is followed until that passes the limit; from then on
    each op's depth is its own nodes plus its deepest input's, worked out for the earlier
    ops once, and ``grad_fn`` is no longer read past the limit.

    >>> guard = ChainGuard(limit=3)
    >>> guard.start(100)
    >>> guard.admit(refs=[], number=100, made=1, ops=[])
    True
    >>> def op(refs, number):  # an op record: its refs and its autograd number
    ...     return ("mul", 0, 0, 0, 0, refs, (), {}, (), None, None, number, 0)
    >>> ops = [op([], 100)]
    >>> guard.admit(refs=[0], number=101, made=2, ops=ops)  # a chain of 1 + 2 nodes
    True
    >>> ops.append(op([0], 101))
    >>> guard.admit(refs=[1], number=103, made=1, ops=ops)  # 1 + 2 + 1 nodes: too deep
    False
    """

    def __init__(self, events: Any = None, limit: Optional[int] = None) -> None:
        self.events = events  # its boundary edges say which op made which tensor node
        self.limit = autograd.MAX_CHAIN if limit is None else limit
        self.first_number = -1
        #: an op whose autograd numbers end at or below this is admitted without asking
        #: (the count bound holds); -1 once chains are followed
        self.admitted_below = -1
        self.too_deep = False  # a chain passed the limit: no node may be touched any more
        self._depths: dict[int, int] = {}  # op index -> depth, once past the count bound
        self._tensors: dict[int, int] = {}  # tensor index -> the op that produced it
        self._following = False

    def start(self, number: int) -> None:
        """Begin a forward, counting from autograd's next sequence number ``number``
        (chains that run on from one top-level forward into the next are not followed)."""
        self.first_number = number
        self.admitted_below = number + self.limit
        self.too_deep = self._following = False
        self._depths.clear()
        self._tensors.clear()

    def admit(self, refs: Sequence[Any], number: int, made: int, ops: Sequence[tuple]) -> bool:
        """Whether the op about to be recorded (index ``len(ops)``, started at autograd
        number ``number``, having made ``made`` nodes) may have its ``grad_fn`` read."""
        if self.too_deep:
            return False
        if number + made <= self.admitted_below:  # the count bound (the op handler's test)
            return True
        if not self._following:
            self._follow(ops, number)
        depth = made + max([self._depth_of(ref) for ref in refs], default=0)
        self._depths[len(ops)] = depth
        self.too_deep = depth > self.limit
        return not self.too_deep

    def _follow(self, ops: Sequence[tuple], number: int) -> None:
        """Work out the depths of the forward's ops recorded so far, in order."""
        self._following = True
        self.admitted_below = -1
        self._learn_producers()
        for index in range(len(ops)):
            op = ops[index]
            if op[OP_NUMBER] < self.first_number:
                continue  # an earlier forward's
            following = ops[index + 1][OP_NUMBER] if index + 1 < len(ops) else number
            own = max(0, following - op[OP_NUMBER])
            self._depths[index] = own + max([self._depth_of(ref) for ref in op[OP_REFS]], default=0)

    def _depth_of(self, ref: Any) -> int:
        if type(ref) is str:
            return 0
        if ref >= 0:
            return self._depths.get(ref, 0)
        op = self._tensors.get(~ref)
        if op is None:  # a tensor node made since: learn its producer
            self._learn_producers()
            op = self._tensors.get(~ref)
        return 0 if op is None else self._depths.get(op, 0)

    def _learn_producers(self) -> None:
        """Which op made each tensor node of the forward (op -> tensor boundary edges)."""
        if self.events is not None:
            self._tensors.update((~target, source) for source, target, _, _ in
                                 self.events.boundary_edges
                                 if type(source) is int and source >= 0 and type(target) is int)
