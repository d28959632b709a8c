"""What an ATen op's schema says: which arguments it writes, which one its result views."""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from torchgraphrec.capture.values import inference_written, version_of

__all__ = ["view_source", "written_by_schema"]


@functools.lru_cache(maxsize=None)
def view_source(func: Any) -> Optional[int]:
    """The position of the argument that the ATen op ``func`` returns a view of (whose
    version counter the view shares from the moment the dispatcher above the caller makes
    it a view), or ``None``.

    >>> view_source(torch.ops.aten.t.default), view_source(torch.ops.aten.addmm.default)
    (0, None)
    """
    schema = getattr(func, "_schema", None)
    if schema is None or not any(r.alias_info is not None and not r.alias_info.is_write
                                 for r in schema.returns):
        return None
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and not argument.alias_info.is_write:
            return position
    return None


def written_by_schema(func: Any, args: tuple, kwargs: dict) -> Optional[list]:
    """``(tensor, version)`` for each argument an ATen op writes in place, at the version it
    will have once the dispatcher above the caller has counted the change."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.is_mutable:
        return None
    found = []
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[position] if position < len(args) else kwargs.get(argument.name)
        if isinstance(value, torch.Tensor):
            found.append((value, inference_written(value) if value.is_inference()
                          else version_of(value) + 1))
    return found or None
