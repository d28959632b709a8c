"""The iterative walk over a finished forward's autograd graph, and op naming."""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from torch.autograd.function import BackwardCFunction

from torchgraphrec._torch import ACCUMULATE_GRAD as _ACCUMULATE_GRAD
from torchgraphrec.errors import CaptureError

__all__ = ["walk", "op_name", "is_function_node", "is_leaf_accumulator", "place", "MAX_CHAIN"]

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
    """Whether an autograd node accumulates into a leaf tensor (a parameter or an input).

    >>> import torch
    >>> leaf = torch.ones(1, requires_grad=True)
    >>> is_leaf_accumulator((leaf * 2).grad_fn.next_functions[0][0])
    True
    """
    return type(node) is _ACCUMULATE_GRAD


def is_function_node(node: Any) -> bool:
    """Whether an autograd node is a custom ``torch.autograd.Function``'s (a reentrant
    checkpoint's, say), which autograd makes before the Function's forward runs its ops.

    >>> import torch
    >>> class Twice(torch.autograd.Function):
    ...     forward = staticmethod(lambda ctx, x: x * 2)
    ...     backward = staticmethod(lambda ctx, grad: grad * 2)
    >>> x = torch.ones(1, requires_grad=True)
    >>> is_function_node(Twice.apply(x).grad_fn), is_function_node((x * 2).grad_fn)
    (True, False)
    """
    return isinstance(node, BackwardCFunction)


#: The longest chain of autograd nodes walked. Past about 40,000, once Python has touched
#: the nodes of one chain, PyTorch's guard against deep recursion when it frees the graph
#: is tripped and the process crashes (pytorch/pytorch#109948); wide graphs are fine.
MAX_CHAIN = 25_000


def walk(starts: Iterable[Any], low: int, high: int) -> list[tuple[int, Any, tuple]]:
    """Autograd nodes reachable from ``starts`` whose sequence number lies in [low, high).

    The walk uses an explicit stack (no recursion limit) and stops at leaf accumulators and
    at nodes made before or after the window. Returns ``(sequence_nr, node, next_functions)`` sorted by sequence number,
    the order in which the forward created the nodes.

    Raises:
        CaptureError: a chain of ops is longer than :data:`MAX_CHAIN`; walking on would
            make PyTorch crash later, when the model's output is freed.
    """
    starts = [node for node in starts if node is not None]
    found = _walk_at_most(starts, low, high, MAX_CHAIN)
    if found is None:  # too many nodes to rule out a long chain without measuring it
        found = _walk_measuring_chains(starts, low, high)
    return sorted(found.values(), key=_first)


def _first(item: tuple[int, Any, tuple]) -> int:
    return item[0]


def _walk_at_most(starts: list[Any], low: int, high: int,
                  limit: int) -> dict[Any, tuple[int, Any, tuple]] | None:
    """The walk, or ``None`` once more than ``limit`` nodes are found: no chain in it can
    then be longer than ``limit``, and no more nodes than that were touched."""
    found: dict[Any, tuple[int, Any, tuple]] = {}
    stack = list(starts)
    while stack:
        node = stack.pop()
        if node in found:
            continue
        number = node._sequence_nr()
        if not low <= number < high:
            continue
        next_functions = node.next_functions
        found[node] = (number, node, next_functions)
        if len(found) > limit:
            return None
        stack += [next_node for next_node, _ in next_functions
                  if next_node is not None and type(next_node) is not _ACCUMULATE_GRAD]
    return found


def _walk_measuring_chains(starts: list[Any], low: int,
                           high: int) -> dict[Any, tuple[int, Any, tuple]]:
    found: dict[Any, tuple[int, Any, tuple]] = {}
    stack = [(node, 0) for node in starts]
    while stack:
        node, depth = stack.pop()
        if node in found:
            continue
        number = node._sequence_nr()
        if not low <= number < high:
            continue
        if depth > MAX_CHAIN:
            raise CaptureError(
                f"this forward chains more than {MAX_CHAIN:,} autograd ops one after another; "
                "walking them from Python makes PyTorch crash when the graph is freed "
                "(pytorch/pytorch#109948), so the recording was stopped. Record a shorter "
                "run, e.g. fewer loop iterations")
        next_functions = node.next_functions
        found[node] = (number, node, next_functions)
        stack += [(next_node, depth + 1) for next_node, _ in next_functions
                  if next_node is not None and type(next_node) is not _ACCUMULATE_GRAD]
    return found


def place(breaks: Sequence[tuple[int, int, int]], numbers: Iterable[int]) -> list[tuple[int, int]]:
    """The call innermost when each autograd node was made, and an estimate of when.

    ``breaks`` are the hooks' breakpoints ``(sequence_nr, call, time)``: from each
    breakpoint's sequence number on, ``call`` was the innermost open call (a tie goes to
    the later breakpoint, since a hook fires before the next op is made). Times between
    breakpoints are interpolated, since autograd nodes carry no timestamp of their own,
    and lie strictly between them where there are nanoseconds enough: a node is made after
    the boundary before it (a call's start, or a child call's end) and before the next.
    ``numbers`` must rise, which makes the pass one merge of two sorted lists.

    >>> place([(0, 0, 100), (4, 1, 200), (4, 0, 300), (8, -1, 700)], [0, 1, 4, 6])
    [(0, 120), (0, 140), (0, 380), (0, 540)]
    """
    placed: list[tuple[int, int]] = []
    position, last = 0, len(breaks) - 1
    start, owner, t_start = breaks[0]
    stop, _, t_stop = breaks[min(1, last)]
    for number in numbers:
        while position < last and stop <= number:
            position += 1
            start, owner, t_start = breaks[position]
            if position < last:
                stop, _, t_stop = breaks[position + 1]
        if position == last:
            placed.append((owner, t_start))
        else:
            placed.append((owner, t_start + (t_stop - t_start) * (number - start + 1)
                           // (stop - start + 1)))
    return placed
