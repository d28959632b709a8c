"""The rendering options: keyword-only, validated once, frozen."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional, Union

from torchgraphrec.render.scale import COSTS
from torchgraphrec.render.theme import THEMES, Theme

__all__ = ["RenderOptions", "RANKDIRS", "ENGINES", "AUTO"]

RANKDIRS = ("TB", "LR", "BT", "RL")
ENGINES = ("auto", "graphviz-pure", "dot", "pygraphviz")
#: The ``depth`` that picks the deepest level whose drawing stays readable.
AUTO = "auto"
_FLAGS = ("include_tensors", "include_params", "fold_repeats", "show_shapes",
          "show_settings", "expand_leaves", "show_costs")


def _one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name}: {value!r} (must be one of {list(allowed)})")


def _check_color_by(color_by: Any) -> None:
    if color_by is None:
        return
    if not isinstance(color_by, str) or not color_by:
        raise TypeError(f"color_by must be an attribute name or None, got {color_by!r}")
    if color_by not in COSTS and "." not in color_by:  # probe statistics are site.stat
        raise ValueError(f"unknown color_by: {color_by!r} (must be one of {list(COSTS)} or a "
                         "probe statistic such as 'grad_output.rms')")


def _check_dpi(dpi: Any) -> None:
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not 1 <= dpi <= 1200:
        raise ValueError(f"dpi must be a whole number from 1 to 1200, got {dpi!r}")


def _check_depth(depth: Any) -> None:
    if depth is None or depth == AUTO:
        return
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be 'auto', None or a whole number >= 0, got {depth!r}")


@dataclass(frozen=True)
class RenderOptions:
    """How to draw a recording.

    The defaults draw what a paper shows: module calls to a readable depth, every module
    without children as one box (name, type, settings, shapes, parameter count), the ops
    that code runs between modules, and the model's named inputs and outputs. The op-level
    drawing is one option away: ``expand_leaves=True``.

    Attributes:
        depth: the deepest module-call level drawn: ``"auto"`` (every level: blocks open to
            their leaf modules, repeats folded; only where that draws more than
            :data:`~torchgraphrec.render.view.AUTO_NODES` nodes, or a drawing that laid
            out is wider across the flow than :data:`~torchgraphrec.render.dot.AUTO_WIDTH`
            points or larger than :data:`~torchgraphrec.render.dot.AUTO_AREA`, the deepest
            level that fits), ``None`` (every level) or a number (calls at that level are
            drawn as one box).
        include_tensors: draw the tensors that the code drawn open hands to a call: those
            a module's own forward computes between its submodules (the input of ``fc2`` in
            ``fc2(torch.relu(fc1(x)))``) and, with ``expand_leaves``, those the ops inside each
            module return. A tensor a box returns is part of that box (its shape is on the
            box's label), so a model made only of submodules (an ``nn.Sequential``) draws
            nothing more unless ``expand_leaves`` opens them. The model's inputs and outputs
            are always drawn.
        include_params: draw parameters and buffers just above the ops that use them, inside
            their module (they are always counted in their module's box).
        include_ops: draw the ops that code runs between modules (``add``, ``cat``...); a
            chain of layout-only ops between two drawn nodes (``view``, ``reshape``,
            ``transpose``, ``contiguous``...) is one edge labelled ``reshape``, and an
            edge into attention is labelled by its role (``query``, ``key``, ``value``);
            ``"all"`` draws every op as recorded, without edge labels.
        fold_repeats: draw a chain of identical sibling calls once, labelled ``× N``.
        rankdir: the direction of flow: ``TB``, ``LR``, ``BT`` or ``RL``.
        theme: ``default`` or ``paper`` (greyscale, serif, print-safe).
        show_shapes: write tensor shapes into labels.
        show_settings: write a module's settings (``3×3, stride 2``, ``p=0.1``) into its box.
        expand_leaves: open modules without children, drawing their ops.
        engine: ``auto``, ``graphviz-pure``, ``dot`` or ``pygraphviz`` (or a path to a
            ``dot``-like binary); where it fails, the next engine found is tried.
        color_by: a cost (``"flops"``, ``"saved_bytes"``, ``"forward_ms"``, ``"params"``
            or another of :data:`~torchgraphrec.render.scale.COSTS`) or a probe statistic
            such as ``"grad_output.rms"``: boxes, ops and parameters are filled on a colour
            scale from the smallest drawn value (palest) to the largest (darkest; a log
            scale where they span two decades; greys in the paper theme), with a legend in
            the value's units. A box at ``depth=k`` has the numbers of everything inside
            it. Clusters are outlined by a statistic; by a cost they are not (theirs is the
            sum of what they hold). Nodes without the value keep their usual colours.
        show_costs: add a line to each box, op and module with what it cost, where
            recorded and not zero: ``1.2 GFLOPs · 34 MB`` (forward FLOPs, activations saved
            for the backward), and the cost ``color_by`` names if another (a time, say:
            times vary from run to run, so they are written only then). The legend says
            which costs the lines hold.
        dpi: a PNG's resolution in dots per inch (Graphviz's 96 by default; 300 for
            print). Other formats are not bitmaps and ignore it.

    >>> RenderOptions(rankdir="XY")
    Traceback (most recent call last):
    ValueError: unknown rankdir: 'XY' (must be one of ['TB', 'LR', 'BT', 'RL'])
    >>> RenderOptions(expand_leaves=True).depth
    'auto'
    >>> RenderOptions(color_by="flop")
    Traceback (most recent call last):
    ValueError: unknown color_by: 'flop' (must be one of ['flops', ...] or a probe statistic such as 'grad_output.rms')
    """

    depth: Optional[Union[int, str]] = AUTO
    include_tensors: bool = False
    include_params: bool = False
    include_ops: Union[bool, str] = True
    fold_repeats: bool = True
    rankdir: str = "TB"
    theme: str = "default"
    show_shapes: bool = True
    show_settings: bool = True
    expand_leaves: bool = False
    engine: str = "auto"
    color_by: Optional[str] = None
    show_costs: bool = False
    dpi: int = 96

    def __post_init__(self) -> None:
        _check_depth(self.depth)
        _check_dpi(self.dpi)
        if not (isinstance(self.include_ops, bool) or self.include_ops == "all"):
            raise ValueError(f"include_ops must be True, False or 'all', got {self.include_ops!r}")
        for flag in _FLAGS:
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        _one_of("rankdir", self.rankdir, RANKDIRS)
        _one_of("theme", self.theme, tuple(THEMES))
        _check_color_by(self.color_by)
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
