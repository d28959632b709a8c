"""Shapes, counts and values as a person writes them, and what changed between two settings."""

from __future__ import annotations

from typing import Any, Optional, Sequence

__all__ = ["dims_text", "shape_text", "value_text", "signed", "split_items", "items_change",
           "clip", "short_name"]


def dims_text(shape: Sequence[int], sep: str = "×") -> str:
    """The sizes of ``shape`` joined by ``sep`` (``""`` for a scalar).

    >>> dims_text((1, 3, 32, 32)), dims_text((2, 8), ", "), dims_text(())
    ('1×3×32×32', '2, 8', '')
    """
    return sep.join(str(dim) for dim in shape)


def shape_text(shape: Sequence[int]) -> str:
    """``(1, 3, 32, 32)`` as ``1×3×32×32``; a scalar as ``scalar``.

    >>> shape_text((1, 3, 32, 32)), shape_text(())
    ('1×3×32×32', 'scalar')
    """
    return dims_text(shape) if len(shape) else "scalar"


def value_text(value: Any) -> str:
    """A describing value as a person writes it.

    >>> value_text((768, 3072)), value_text(((2, 8), (2, 8))), value_text(""), value_text(None)
    ('768×3072', '2×8, 2×8', "''", '-')
    >>> value_text(()), value_text(1234567)
    ('scalar', '1,234,567')
    """
    if value is None:
        return "-"
    if isinstance(value, tuple) and all(isinstance(item, tuple) for item in value) and value:
        return ", ".join(value_text(item) for item in value)
    if isinstance(value, tuple) and all(isinstance(item, int) for item in value):
        return shape_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if value == "":
        return "''"
    return str(value)


def signed(count: int) -> str:
    """A count with its sign and thousands separators.

    >>> signed(786432), signed(-5), signed(0)
    ('+786,432', '-5', '+0')
    """
    return f"{count:+,}"


def split_items(text: str) -> list[str]:
    """``extra_repr``-style text split at its top-level commas, empty items left out.

    >>> split_items("3, 16, kernel_size=(3, 3), stride=(1, 1)")
    ['3', '16', 'kernel_size=(3, 3)', 'stride=(1, 1)']
    >>> split_items("")
    []
    """
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if char == "," and depth == 0:
            items.append(text[start:index].strip())
            start = index + 1
    items.append(text[start:].strip())
    return [item for item in items if item]


def _keyed(items: list[str]) -> dict[str, str]:
    return {(item.split("=", 1)[0] if "=" in item else f"#{index}"): item
            for index, item in enumerate(items)}


def items_change(old: str, new: str) -> str:
    """What changed between two settings (or op args) texts, item by item where they line
    up, else the whole texts. Both texts leave a keyword at its default out, so a keyword
    on one side only changed from or to its default.

    >>> items_change("in_features=768, out_features=3072, bias=True",
    ...              "in_features=768, out_features=4096, bias=True")
    'out_features=3072 -> 4096'
    >>> items_change("p=0.1", ""), items_change("dim=1", "dim=2, keepdim=True")
    ('p=0.1 -> default', 'dim=1 -> 2, keepdim=default -> True')
    >>> items_change("2, 8, -1", "2, -1")
    '2, 8, -1 -> 2, -1'
    """
    old_items, new_items = _keyed(split_items(old)), _keyed(split_items(new))
    positional = [{key for key in items if key[:1] == "#"} for items in (old_items, new_items)]
    if not (old_items or new_items) or positional[0] != positional[1]:
        return f"{value_text(old)} -> {value_text(new)}"
    parts = []
    for key in dict.fromkeys([*old_items, *new_items]):
        before, after = old_items.get(key), new_items.get(key)
        if before == after:
            continue
        if before is None:
            parts.append(f"{key}=default -> {after.split('=', 1)[1]}")
        elif after is None:
            parts.append(f"{before} -> default")
        else:
            parts.append(f"{before} -> {after.split('=', 1)[1] if '=' in before else after}")
    return ", ".join(parts)


def clip(line: str, width: Optional[int] = 110) -> str:
    """``line`` cut to ``width`` characters, ending in ``…`` when cut.

    >>> clip("abcdef", 4)
    'abc…'
    """
    return line if width is None or len(line) <= width else line[:width - 1] + "…"


def short_name(qualname: str, parent_qualname: str = "") -> str:
    """A module's name inside its enclosing call: ``layers.0.0`` in ``layers.0`` is ``0``.

    Containers that are never called (a ``ModuleList``) keep their part: ``h.0`` in the
    root call.

    >>> short_name("layers.0.0", "layers.0"), short_name("h.0"), short_name("a.b", "x")
    ('0', 'h.0', 'a.b')
    """
    if parent_qualname and qualname.startswith(parent_qualname + "."):
        return qualname[len(parent_qualname) + 1:]
    return qualname
