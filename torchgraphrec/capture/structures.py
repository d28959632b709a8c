"""Finding the tensors inside nested arguments and outputs."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

__all__ = ["flatten_tensors", "tensors_with_paths"]

_Tensor = torch.Tensor
_ATOMS = frozenset({bool, int, float, str, bytes, complex})


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
    if type(value) is tuple and len(value) == 1 and isinstance(value[0], _Tensor):
        return [value[0]]  # the common case of a module called with one tensor
    if isinstance(value, _Tensor):
        return [value]
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Tensor):
            found.append(item)
            continue
        if item is None or type(item) in _ATOMS:  # most keyword values: flags, sizes, names
            continue
        if isinstance(item, (tuple, list)):
            children = item
        elif isinstance(item, dict):
            children = list(item.values())  # a subclass may make values() a generator
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [getattr(item, field.name) for field in dataclasses.fields(item)]
        else:
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        stack += reversed(children)  # type: ignore[call-overload]
    return found


def tensors_with_paths(value: Any, root: str = "") -> list[tuple[str, torch.Tensor]]:
    """The tensors in ``value`` with their paths inside it, depth first.

    >>> import torch
    >>> found = tensors_with_paths({"x": (torch.zeros(1), None), "y": [torch.ones(2)]})
    >>> [path for path, _ in found]
    ["['x'][0]", "['y'][0]"]
    >>> tensors_with_paths(torch.zeros(1))[0][0]
    ''
    """
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(root, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _Tensor):
            found.append((path, item))
            continue
        children = _named_children(item)
        if children is None or id(item) in seen:
            continue
        seen.add(id(item))
        stack.extend(reversed([(path + name, child) for name, child in children]))
    return found


def _named_children(item: Any) -> list[tuple[str, Any]] | None:
    if isinstance(item, (tuple, list)):
        return [(f"[{index}]", child) for index, child in enumerate(item)]
    if isinstance(item, dict):
        return [(f"[{key!r}]", child) for key, child in item.items()]
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [(f".{field.name}", getattr(item, field.name)) for field in dataclasses.fields(item)]
    return None
