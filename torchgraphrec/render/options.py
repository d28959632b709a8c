"""The rendering options: keyword-only, validated once, frozen."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from torchgraphrec.render.theme import THEMES, Theme

__all__ = ["RenderOptions", "RANKDIRS", "ENGINES"]

RANKDIRS = ("TB", "LR", "BT", "RL")
ENGINES = ("auto", "graphviz-pure", "dot")


def _one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name}: {value!r} (must be one of {list(allowed)})")


@dataclass(frozen=True)
class RenderOptions:
    """How to draw a recording.

    Attributes:
        depth: the deepest module-call level drawn (``None``: everything); calls at that
            level are drawn as one box with their shapes and parameter count.
        include_tensors: draw tensors between calls.
        include_params: draw parameters.
        include_ops: draw autograd ops; without them a call with no sub-calls is one box.
        fold_repeats: draw a run of identical sibling calls once, labelled ``× N``.
        rankdir: the direction of flow: ``TB``, ``LR``, ``BT`` or ``RL``.
        theme: ``default`` or ``paper`` (greyscale, serif, print-safe).
        show_shapes: write tensor shapes into labels.
        engine: ``auto``, ``graphviz-pure`` or ``dot`` (or a path to a ``dot``-like binary).
        color_by: a numeric node attribute, such as a probe statistic ``"grad_output.rms"``:
            boxes and parameters are filled, and clusters outlined, on a colour scale from
            the smallest to the largest drawn value, with a legend.

    >>> RenderOptions(rankdir="XY")
    Traceback (most recent call last):
    ValueError: unknown rankdir: 'XY' (must be one of ['TB', 'LR', 'BT', 'RL'])
    """

    depth: Optional[int] = None
    include_tensors: bool = True
    include_params: bool = True
    include_ops: bool = True
    fold_repeats: bool = True
    rankdir: str = "TB"
    theme: str = "default"
    show_shapes: bool = True
    engine: str = "auto"
    color_by: Optional[str] = None

    def __post_init__(self) -> None:
        depth = self.depth
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)
                                  or depth < 0):
            raise ValueError(f"depth must be None or a whole number >= 0, got {depth!r}")
        for flag in ("include_tensors", "include_params", "include_ops", "fold_repeats",
                     "show_shapes"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        _one_of("rankdir", self.rankdir, RANKDIRS)
        _one_of("theme", self.theme, tuple(THEMES))
        if self.color_by is not None and (not isinstance(self.color_by, str) or not self.color_by):
            raise TypeError(f"color_by must be an attribute name or None, got {self.color_by!r}")
        if not isinstance(self.engine, str) or not self.engine:
            raise ValueError(f"engine must be one of {list(ENGINES)} or a path, got {self.engine!r}")

    @classmethod
    def of(cls, options: dict[str, Any]) -> "RenderOptions":
        """Options from keyword arguments, naming any unknown one."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r} (must be one of {known})")
        return cls(**options)

    @property
    def style(self) -> Theme:
        """The :class:`Theme` named by :attr:`theme`."""
        return THEMES[self.theme]
