"""When a node ran, as every export reads its stamps: one rule for what counts as recorded."""

from __future__ import annotations

from typing import Any, Mapping, Optional

__all__ = ["span"]


def span(attrs: Mapping[str, Any], start: str, end: str) -> Optional[tuple[int, int]]:
    """The stamps ``start`` and ``end`` of a node as ``(start, end)``, or ``None`` where
    they were not recorded (a backward may not have been) or end before they start: such
    a pair cannot be a time the node ran, so it counts as not recorded, and no export
    writes a negative duration.

    >>> span({"t_start_ns": 1500, "t_end_ns": 4250}, "t_start_ns", "t_end_ns")
    (1500, 4250)
    >>> span({"t_start_ns": 7, "t_end_ns": 7}, "t_start_ns", "t_end_ns")  # an instant
    (7, 7)
    >>> span({"t_backward_start_ns": 90, "t_backward_end_ns": 40},
    ...      "t_backward_start_ns", "t_backward_end_ns") is None
    True
    >>> span({"t_start_ns": 7}, "t_start_ns", "t_end_ns") is None
    True
    """
    if start not in attrs or end not in attrs:
        return None
    if attrs[end] < attrs[start]:
        return None
    return attrs[start], attrs[end]
