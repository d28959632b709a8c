"""Selecting modules to probe: by name, type, index, ``(depth, idx)`` label, depth or leaves.

Selectors compose with ``&``, ``|`` and ``~`` and are resolved against the model when the
recorder is entered. A name or label that names nothing raises ``ValueError`` with the
closest matches; a selector that matches nothing warns.

>>> import torch
>>> from torchgraphrec import select as S
>>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
>>> sorted(name for name, _ in (S.type(torch.nn.Linear) & ~S.name("^2$")).resolve(model))
['0']
>>> S.label("1-4").resolve(model)
Traceback (most recent call last):
ValueError: unknown label '1-4' (the model's depth-1 labels are 1-1 to 1-3); did you mean '1-3', '1-2', '1-1'?
"""

from __future__ import annotations

import builtins
import difflib
import re
from typing import Callable, Iterable, Sequence

from torch import nn

from torchgraphrec.errors import warn

__all__ = ["Selector", "name", "type", "children", "modules", "label", "depth", "leaves", "labels"]

Named = list[tuple[str, nn.Module]]
_META = re.compile(r"[\\^$.*+?()\[\]{}|]")


class Selector:
    """A set of a model's modules, computed when a recorder is entered."""

    def __init__(self, description: str, pick: Callable[[nn.Module, Named], set[str]]) -> None:
        self.description = description
        self._pick = pick

    def __repr__(self) -> str:
        return f"<select {self.description}>"

    def __and__(self, other: "Selector") -> "Selector":
        return Selector(f"({self.description} & {other.description})",
                        lambda m, named: self._pick(m, named) & other._pick(m, named))

    def __or__(self, other: "Selector") -> "Selector":
        return Selector(f"({self.description} | {other.description})",
                        lambda m, named: self._pick(m, named) | other._pick(m, named))

    def __invert__(self) -> "Selector":
        return Selector(f"~{self.description}",
                        lambda m, named: {n for n, _ in named} - self._pick(m, named))

    def resolve(self, model: nn.Module) -> Named:
        """The selected ``(qualname, module)`` pairs, in ``named_modules`` order; warns when
        there are none."""
        named = list(model.named_modules())
        chosen = self._pick(model, named)
        if not chosen:
            warn(f"{self!r} selects no module of {builtins.type(model).__name__}")
        return [(qualname, module) for qualname, module in named if qualname in chosen]


def _hint(value: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def name(pattern: str) -> Selector:
    """Modules whose qualname matches the regular expression ``pattern`` (``re.search``).

    A plain name (no regex characters) must name a module exactly, or ``ValueError`` says
    which names are close.
    """
    compiled = re.compile(pattern)

    def pick(model: nn.Module, named: Named) -> set[str]:
        names = [n for n, _ in named]
        if not _META.search(pattern):
            if pattern not in names:
                raise ValueError(f"unknown module name {pattern!r}{_hint(pattern, names)}")
            return {pattern}
        return {n for n in names if compiled.search(n)}

    return Selector(f"name({pattern!r})", pick)


def type(*classes: builtins.type) -> Selector:  # noqa: A001 - users write S.type(nn.Linear)
    """Modules that are instances of any of ``classes``."""
    if not classes or not all(isinstance(c, builtins.type) and issubclass(c, nn.Module)
                              for c in classes):
        raise TypeError(f"select.type takes nn.Module classes, got {classes!r}")
    return Selector(f"type({', '.join(c.__name__ for c in classes)})",
                    lambda model, named: {n for n, m in named if isinstance(m, classes)})


def _indexed(kind: str, indices: Sequence[int], listing: Callable[[nn.Module, Named], Named]
             ) -> Selector:
    if not isinstance(indices, (list, tuple, range)) or \
            not all(builtins.type(i) is int for i in indices):
        raise TypeError(f"{kind}(indices=...) takes a list of ints, got {indices!r}")

    def pick(model: nn.Module, named: Named) -> set[str]:
        items = listing(model, named)
        bad = [i for i in indices if not -len(items) <= i < len(items)]
        if bad:
            raise ValueError(f"{kind} index {bad[0]} is out of range (the model has "
                             f"{len(items)} {kind})")
        return {items[i][0] for i in indices}

    return Selector(f"{kind}(indices={list(indices)})", pick)


def children(indices: Sequence[int]) -> Selector:
    """The model's direct children at these positions (torchfunc's ``children``)."""
    return _indexed("children", indices, lambda model, named: list(model.named_children()))


def modules(indices: Sequence[int]) -> Selector:
    """Modules at these positions of ``model.modules()``, the model itself at 0."""
    return _indexed("modules", indices, lambda model, named: named)


def labels(model: nn.Module) -> dict[str, str]:
    """torchinfo's ``depth-idx`` label of every module but the root: ``"1-2"`` is the
    second module at depth 1, counted in ``named_modules`` order."""
    counts: dict[int, int] = {}
    result = {}
    for qualname, _ in model.named_modules():
        if not qualname:
            continue
        level = qualname.count(".") + 1
        counts[level] = counts.get(level, 0) + 1
        result[f"{level}-{counts[level]}"] = qualname
    return result


def label(*wanted: str) -> Selector:
    """Modules by torchinfo/scio ``(depth, idx)`` labels such as ``"1-3"``."""
    if not all(isinstance(item, str) for item in wanted):
        raise TypeError(f"label() takes labels such as '1-3', got {wanted!r}")

    def pick(model: nn.Module, named: Named) -> set[str]:
        known = labels(model)
        for item in wanted:
            if item not in known:
                level = item.split("-")[0]
                same = sorted((k for k in known if k.split("-")[0] == level),
                              key=lambda k: int(k.split("-")[1]))
                span = f" (the model's depth-{level} labels are {same[0]} to {same[-1]})" if same else ""
                raise ValueError(f"unknown label {item!r}{span}{_hint(item, same or known)}")
        return {known[item] for item in wanted}

    return Selector(f"label({', '.join(repr(w) for w in wanted)})", pick)


def depth(level: int) -> Selector:
    """Modules at nesting depth ``level`` (the model itself is at 0)."""
    if builtins.type(level) is not int or level < 0:
        raise ValueError(f"depth() takes an int >= 0, got {level!r}")
    return Selector(f"depth({level})", lambda model, named: {
        n for n, _ in named if (n.count(".") + 1 if n else 0) == level})


def leaves() -> Selector:
    """Modules with no sub-modules."""
    return Selector("leaves()", lambda model, named: {
        n for n, m in named if not any(True for _ in m.children())})
