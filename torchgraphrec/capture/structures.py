"""Finding the tensors inside nested arguments and outputs."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import torch

__all__ = ["flatten_tensors"]

_Tensor = torch.Tensor


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Return the tensors in ``value``, depth first, in the order they appear.

    ``value`` may nest tuples, lists, dicts (``ModelOutput`` included), dataclasses,
    ``None`` and other non-tensor values to any depth; a container that holds itself is
    visited once. Nothing is copied and generators are left unconsumed.

    >>> import torch
    >>> a, b = torch.zeros(1), torch.ones(2)
    >>> [t.shape[0] for t in flatten_tensors({"x": (a, None), "y": [b, "text"]})]
    [1, 2]
    """
    if isinstance(value, _Tensor):
        return [value]
    if type(value) is tuple and len(value) == 1 and isinstance(value[0], _Tensor):
        return [value[0]]  # the common case of a module called with one tensor
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Tensor):
            found.append(item)
            continue
        children = _children(item)
        if children is None or id(item) in seen:
            continue
        seen.add(id(item))
        stack.extend(reversed(list(children)))
    return found


def _children(item: Any) -> Iterable[Any] | None:
    if isinstance(item, (tuple, list)):
        return item
    if isinstance(item, dict):
        return item.values()
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [getattr(item, field.name) for field in dataclasses.fields(item)]
    return None
