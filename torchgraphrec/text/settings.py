"""A module's settings (its ``extra_repr()``) shortened into one label line: ``3×3, stride 2``."""

from __future__ import annotations

import re
from typing import Callable, Optional

from torchgraphrec.text.values import split_items

__all__ = ["settings_text", "MAX_CHARS"]

#: A settings line longer than this is cut after its last whole item, ending in ``…``.
MAX_CHARS = 40

#: Values that say nothing a reader of the architecture needs: the usual defaults.
_DROPPED = {
    "bias": "True", "affine": "True", "track_running_stats": "True",
    "elementwise_affine": "True", "momentum": "0.1", "ceil_mode": "False",
    "count_include_pad": "True", "return_indices": "False", "approximate": "'none'",
    "end_dim": "-1", "padding_mode": "'zeros'", "dilation": "1", "groups": "1",
    "padding": "0", "stride": "1", "output_padding": "0", "batch_first": "False",
}
_ALWAYS_DROPPED = ("inplace",)
_NUMBER = re.compile(r"-?\d+")
_DIMS = re.compile(r"([123])d$")


def _numbers(value: str) -> Optional[list[str]]:
    """``(3, 3)`` or ``3`` as ``['3', '3']`` / ``['3']``; ``None`` if not plain integers."""
    parts = [part.strip() for part in value.strip("()[]").split(",") if part.strip()]
    return parts if parts and all(_NUMBER.fullmatch(part) for part in parts) else None


def _grid(value: str, dims: int) -> str:
    """``(3, 3)`` as ``3×3``; an integer as a square (``2`` as ``2×2``) for an N-d layer."""
    numbers = _numbers(value)
    if numbers is None:
        return value.strip("'\"")
    if len(numbers) == 1:
        numbers = numbers * dims
    return "×".join(numbers)


def _uniform(value: str) -> str:
    """``(2, 2)`` as ``2`` (the same along every axis), else as ``2×1``."""
    numbers = _numbers(value)
    if numbers is None:
        return value.strip("'\"")
    return numbers[0] if len(set(numbers)) == 1 else "×".join(numbers)


_NAMED: dict[str, Callable[[str, int], str]] = {
    "kernel_size": lambda value, dims: _grid(value, dims),
    "output_size": lambda value, dims: f"out {_grid(value, dims)}",
    "stride": lambda value, dims: f"stride {_uniform(value)}",
    "padding": lambda value, dims: f"pad {_uniform(value)}",
    "dilation": lambda value, dims: f"dilation {_uniform(value)}",
    "groups": lambda value, dims: f"groups {value}",
    "bias": lambda value, dims: "no bias",
    "scale_factor": lambda value, dims: f"scale {_uniform(value)}",
}


#: Layer types whose first two numbers are no features in and out: shown as named.
_NOT_IN_OUT: dict[str, Callable[[str, str], list[str]]] = {
    "GroupNorm": lambda groups, channels: [channels, f"groups {groups}"],
}


def _is_default(key: str, value: str, pool: bool) -> bool:
    if pool and key == "stride":  # a pool's default stride is its kernel's size, not 1
        return value == "None"
    if key in _ALWAYS_DROPPED or _DROPPED.get(key) == value:
        return True
    numbers = _numbers(value) if key in ("stride", "dilation", "padding") else None
    return bool(numbers) and set(numbers) == {"0" if key == "padding" else "1"}


def _item_text(item: str, dims: int, pool: bool) -> str:
    key, sep, value = item.partition("=")
    if not sep:
        return _uniform(item) if item.startswith(("(", "[")) else item
    key, value = key.strip(), value.strip()
    if _is_default(key, value, pool):
        return ""
    if key in ("in_features", "out_features", "num_embeddings", "embedding_dim"):
        return value
    if key in _NAMED:
        return _NAMED[key](value, dims)
    return f"{key}={value.strip(chr(39))}" if value.startswith("'") else f"{key}={value}"


def settings_text(layer_type: str, settings: str, limit: int = MAX_CHARS) -> str:
    """``settings`` (a module's ``extra_repr()``) as a short label line.

    Usual defaults are left out, feature counts become ``in→out``, kernels ``3×3``.

    >>> settings_text("Conv2d", "3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False")
    '3→64, 7×7, stride 2, pad 3, no bias'
    >>> settings_text("Linear", "in_features=768, out_features=3072, bias=True")
    '768→3072'
    >>> settings_text("Dropout", "p=0.1, inplace=False"), settings_text("ReLU", "inplace=True")
    ('p=0.1', '')
    >>> settings_text("LayerNorm", "(768,), eps=1e-05, elementwise_affine=True")
    '768, eps=1e-05'
    >>> settings_text("MaxPool2d", "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False")
    '2×2, stride 2'

    A pool's stride is always shown (its default is the kernel's size), and a group norm's
    two numbers are its groups and channels:

    >>> settings_text("AvgPool1d", "kernel_size=(3,), stride=(1,), padding=(0,)")
    '3, stride 1'
    >>> settings_text("GroupNorm", "4, 16, eps=1e-05, affine=True")
    '16, groups 4, eps=1e-05'
    """
    match = _DIMS.search(layer_type.lower())
    dims = int(match.group(1)) if match else 1
    pool = "Pool" in layer_type and not layer_type.startswith("Adaptive")
    parts = [_item_text(item, dims, pool) for item in split_items(settings)]
    parts = [part for part in parts if part]
    if len(parts) >= 2 and _numbers(parts[0]) and _numbers(parts[1]) \
            and len(_numbers(parts[0]) or ()) == 1 and len(_numbers(parts[1]) or ()) == 1:
        named = _NOT_IN_OUT.get(layer_type)
        parts[:2] = named(parts[0], parts[1]) if named else [f"{parts[0]}→{parts[1]}"]
    text = ", ".join(parts)
    while len(text) > limit and len(parts) > 1:
        parts.pop()
        text = ", ".join(parts) + ", …"
    return text if len(text) <= limit else text[:limit - 1] + "…"
