"""The iterative walk over a finished forward's autograd graph, and op naming."""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import Any, Iterable, Sequence

__all__ = ["walk", "op_name", "is_leaf_accumulator", "Timeline"]

_SUFFIX = re.compile(r"Backward\d*$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_names: dict[str, str] = {}


def op_name(grad_fn_name: str) -> str:
    """The forward op's name for an autograd node's class name.

    >>> op_name("AddmmBackward0"), op_name("NativeBatchNormBackward0"), op_name("CopySlices")
    ('addmm', 'native_batch_norm', 'copy_slices')
    >>> op_name("MaxPool2DWithIndicesBackward0")
    'max_pool2d_with_indices'
    """
    name = _names.get(grad_fn_name)
    if name is None:
        stem = _SUFFIX.sub("", grad_fn_name) or grad_fn_name
        name = _names[grad_fn_name] = _CAMEL.sub("_", stem).lower().replace("2_d", "2d")
    return name


def is_leaf_accumulator(node: Any) -> bool:
    """Whether an autograd node accumulates into a leaf tensor (a parameter or an input)."""
    return type(node).__name__ == "AccumulateGrad"


def walk(starts: Iterable[Any], low: int, high: int) -> list[Any]:
    """Autograd nodes reachable from ``starts`` whose sequence number lies in [low, high).

    The walk uses an explicit stack (no recursion limit) and stops at nodes made before or
    after the window and at leaf accumulators. The result is sorted by sequence number, the
    order in which the forward created the nodes.
    """
    found: dict[Any, int] = {}
    stack = [node for node in starts if node is not None]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        number = node._sequence_nr()
        if not low <= number < high or is_leaf_accumulator(node):
            continue
        found[node] = number
        stack.extend(next_node for next_node, _ in node.next_functions if next_node is not None)
    return sorted(found, key=found.__getitem__)


class Timeline:
    """Maps an autograd sequence number to the innermost call and an estimated time.

    Built from the hooks' breakpoints ``(sequence_nr, call, time)``: from each breakpoint's
    sequence number on, ``call`` was the innermost open call. Times between breakpoints are
    interpolated, since autograd nodes carry no timestamp of their own.
    """

    def __init__(self, breaks: Sequence[tuple[int, int, int]]) -> None:
        self._numbers = [number for number, _, _ in breaks]
        self._breaks = breaks

    def owner(self, number: int) -> int:
        """The call that was innermost when node ``number`` was made."""
        return self._breaks[self._position(number)][1]

    def time(self, number: int) -> int:
        """An estimate of when node ``number`` was made, in ns."""
        position = self._position(number)
        start, _, t_start = self._breaks[position]
        if position + 1 == len(self._breaks):
            return t_start
        stop, _, t_stop = self._breaks[position + 1]
        return t_start + (t_stop - t_start) * (number - start) // max(1, stop - start)

    def _position(self, number: int) -> int:
        # The last breakpoint at or before ``number``; ties go to the later one, since a
        # hook fires before the next op is made.
        return max(0, bisect_right(self._numbers, number) - 1)
