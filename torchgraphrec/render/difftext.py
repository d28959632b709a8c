"""What a drawing of a diff writes on a node: its mark, ``old → new`` lines, what differs inside."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from torchgraphrec.text import cost_text, items_change, split_items, value_text

__all__ = ["MARKS", "MAX_LINES", "marked", "retyped", "change_lines", "clipped", "inside_line"]

#: The mark before the title of an added or removed node: the status reads without colour.
MARKS: Mapping[str, str] = {"added": "+ ", "removed": "− "}

#: Change lines written on one node at most; the tooltip has them all.
MAX_LINES = 3

#: The order in which a layer's changes are written, and the word before each.
_LAYER = (("training", ""), ("settings", ""), ("num_params", ""), ("both_shapes", "in, out "),
          ("output_shapes", "out "), ("input_shapes", "in "), ("both_dtypes", "in, out "),
          ("output_dtypes", "out "), ("input_dtypes", "in "))
_WORDS = {"dtype": "", "shape": "", "args": "", "name": "name ", "role": "",
          "requires_grad": "", "buffer": "buffer ", "nested": "nested "}


def marked(title: str, status: str) -> str:
    """``title`` with the mark of ``status``.

    >>> marked("h.2: GPT2Block", "added"), marked("drop: Dropout", "removed")
    ('+ h.2: GPT2Block', '− drop: Dropout')
    """
    return MARKS.get(status, "") + title


def retyped(title: str, old: str, new: str) -> str:
    """A call's title with its type written ``old → new``.

    >>> retyped("act: GELU", "ReLU", "GELU"), retyped("Net", "Old", "Net")
    ('act: ReLU → GELU', 'Old → Net')
    """
    head, colon, rest = title.partition(": ")
    if colon and rest.startswith(new):
        return f"{head}: {old} → {rest}"
    return f"{old} → {title}" if title.startswith(new) else title


def _value_lines(name: str, old: Any, new: Any) -> list[str]:
    """The lines saying that ``name`` went from ``old`` to ``new``."""
    if name in ("settings", "args") and old and new:  # item by item, as the summary does
        return [item.replace(" -> ", " → ") for item in split_items(items_change(old, new))]
    if name in ("settings", "args"):
        return [f"{old or '(none)'} → {new or '(none)'}"]
    if name == "training":
        return [f"{'train' if old else 'eval'} → {'train' if new else 'eval'}"]
    if name == "requires_grad":
        return [f"{'trainable' if old else 'frozen'} → {'trainable' if new else 'frozen'}"]
    if name == "num_params":  # "484 → 1.5k params"
        return [f"{cost_text(old or 0, 'params').split()[0]} → {cost_text(new or 0, 'params')}"]
    return [f"{value_text(old)} → {value_text(new)}"]


def _lines(name: str, word: str, change: tuple) -> list[str]:
    return [word + line for line in _value_lines(name, *change)]


def change_lines(kind: str, changes: Mapping[str, tuple],
                 params: Iterable[tuple[str, Mapping[str, tuple]]] = ()) -> list[str]:
    """Every ``old → new`` line of a changed node, most telling first (its type is written
    in its title by :func:`retyped`). A layer also gets the changes of its own parameters
    (``params``: leaf name and changes); its parameter count then goes without saying.

    >>> change_lines("layer", {"settings": ("in_features=8, out_features=16, bias=True",
    ...                                     "in_features=8, out_features=32, bias=True"),
    ...                        "num_params": (144, 288), "output_shapes": (((3, 16),), ((3, 32),))},
    ...              [("weight", {"shape": ((16, 8), (32, 8))})])
    ['out_features=16 → 32', 'weight 16×8 → 32×8', 'out 3×16 → 3×32']
    >>> change_lines("layer", {"num_params": (484, 1476), "input_shapes": ((3, 16),) * 2,
    ...                        "output_shapes": ((3, 16),) * 2})
    ['484 → 1.5k params', 'in, out 3×16 → 3×16']
    >>> change_lines("op", {"args": ("training=True", "")}), change_lines("param", {
    ...     "shape": ((768, 3072), (768, 4096))})
    (['training=True → (none)'], ['768×3072 → 768×4096'])
    """
    if kind != "layer":
        return [line for name in changes for line in _lines(name, _WORDS.get(name, ""),
                                                            changes[name])]
    weights = [f"{leaf} {line}" for leaf, own in params for name in own
               for line in _lines(name, _WORDS.get(name, ""), own[name])]
    lines: list[str] = []
    changes = _merged_sides(changes)
    for name, word in _LAYER:
        if name == "num_params" and weights:
            lines += weights  # the count goes without saying
        elif name in changes:
            lines += _lines(name, word, changes[name])
    return lines


def _merged_sides(changes: Mapping[str, tuple]) -> dict[str, tuple]:
    """A call that received and returned the same change (most calls, when a width
    changed) says it once: ``in, out 3×16 → 3×32``."""
    found = dict(changes)
    for what in ("shapes", "dtypes"):
        if found.get(f"input_{what}") is not None and \
                found.get(f"input_{what}") == found.get(f"output_{what}"):
            found[f"both_{what}"] = found.pop(f"input_{what}")
            del found[f"output_{what}"]
    return found


def clipped(lines: Sequence[str], limit: int = MAX_LINES) -> list[str]:
    """At most ``limit`` lines, the last saying how many more there are.

    >>> clipped(["a", "b", "c", "d", "e"])
    ['a', 'b', '… 3 more']
    """
    if len(lines) <= limit:
        return list(lines)
    return [*lines[:limit - 1], f"… {len(lines) - limit + 1} more"]


def inside_line(counts: Mapping[tuple[str, str], int]) -> str:
    """What differs inside a box, from counts of ``(status, kind)`` (kinds ``layer``,
    ``op`` and ``param``).

    >>> inside_line({("removed", "op"): 1, ("changed", "op"): 2, ("added", "layer"): 3,
    ...              ("removed", "param"): 1})
    'inside: 3 calls added; 1 op, 1 param removed; 2 ops changed'
    >>> inside_line({})
    ''
    """
    parts = []
    for status in ("added", "removed", "changed"):
        found = [f"{counts[status, kind]} {noun}{'' if counts[status, kind] == 1 else 's'}"
                 for kind, noun in (("layer", "call"), ("op", "op"), ("param", "param"))
                 if counts.get((status, kind))]
        if found:
            parts.append(f"{', '.join(found)} {status}")
    return "inside: " + "; ".join(parts) if parts else ""
