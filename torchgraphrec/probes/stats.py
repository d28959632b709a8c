"""Statistics a probe keeps of each tensor it sees: named ones, ``full`` copies, or callables.

Each statistic maps a tensor to a tensor (a 0-d one for scalars) and never changes its input.
Integer and bool tensors are read as floats; norms of half-precision tensors are computed in
float32 (their squares overflow float16). A statistic of an empty tensor is ``nan`` where it
has no value (``mean``, ``std``, ``min``, ``max``, ``absmax``, ``rms``).

>>> x = torch.tensor([[3.0, -4.0], [0.0, 0.0]])
>>> float(rms(x)), float(l2(x)), float(absmax(x)), float(nonzero(x)), float(dead(x))
(2.5, 5.0, 4.0, 0.5, 0.75)
>>> float(max(torch.empty(0))), float(rms(torch.full((4,), 300.0, dtype=torch.float16)))
(nan, 300.0)
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Sequence, Union

import torch

__all__ = ["STATS", "Stat", "Keeper", "Cosine", "keepers", "full", "full_on", "mean", "std", "min", "max",
           "absmax", "l2", "rms", "nonzero", "dead", "hist"]

Stat = Callable[[torch.Tensor], torch.Tensor]


def _float(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.detach()
    return tensor if tensor.is_floating_point() or tensor.is_complex() else tensor.float()


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a detached copy on the CPU (the autograd graph is not kept)."""
    return tensor.detach().to("cpu", copy=True)


def full_on(device: Union[str, torch.device]) -> Stat:
    """Like :func:`full`, but the copies go to ``device`` (``keep=stats.full_on("cuda")``)."""
    def full(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().to(device, copy=True)

    return full


def mean(tensor: torch.Tensor) -> torch.Tensor:
    return _float(tensor).mean()


def std(tensor: torch.Tensor) -> torch.Tensor:
    values = _float(tensor)
    return values.std() if values.numel() > 1 else values.new_tensor(float("nan"))


def _nan_if_empty(reduction: Callable[[torch.Tensor], torch.Tensor],
                  values: torch.Tensor) -> torch.Tensor:
    """``reduction(values)``, or ``nan`` for an empty tensor (torch's ``min`` and ``max``
    refuse one: an empty batch must not fail the user's forward)."""
    return reduction(values) if values.numel() else values.new_tensor(float("nan"))


def _ordered(tensor: torch.Tensor) -> torch.Tensor:
    """Values that have an order: a complex tensor's magnitudes (complex numbers have none).

    >>> _ordered(torch.tensor([3 + 4j])).tolist()
    [5.0]
    """
    values = _float(tensor)
    return values.abs() if values.is_complex() else values


def min(tensor: torch.Tensor) -> torch.Tensor:  # noqa: A001 - the statistic's own name
    return _nan_if_empty(torch.min, _ordered(tensor))


def max(tensor: torch.Tensor) -> torch.Tensor:  # noqa: A001
    return _nan_if_empty(torch.max, _ordered(tensor))


def absmax(tensor: torch.Tensor) -> torch.Tensor:
    return _nan_if_empty(torch.max, _float(tensor).abs())


def _norm(tensor: torch.Tensor) -> torch.Tensor:
    # float16's largest value is 65504: the sum of squares of a few hundred activations of
    # a few hundred overflows it, so half types are summed (and answered) in float32
    values = _float(tensor)
    return torch.linalg.vector_norm(values, dtype=torch.promote_types(values.dtype,
                                                                      torch.float32))


def l2(tensor: torch.Tensor) -> torch.Tensor:
    return _norm(tensor)


def rms(tensor: torch.Tensor) -> torch.Tensor:
    # one fused reduction: pow(2).mean() makes a squared copy of every activation first
    count = tensor.numel()
    return _norm(tensor) / (math.sqrt(count) if count else math.nan)


def nonzero(tensor: torch.Tensor) -> torch.Tensor:
    """The fraction of elements that are not zero (monitorch's activation rate)."""
    return (_float(tensor) != 0).float().mean()


def dead(tensor: torch.Tensor) -> torch.Tensor:
    """The fraction of elements at or below zero (dead ReLU units); of a complex tensor,
    those that are zero."""
    return (_ordered(tensor) <= 0).float().mean()


def hist(tensor: torch.Tensor, bins: int = 16) -> torch.Tensor:
    """Counts in ``bins`` equal bins between the least and the greatest finite value (an
    activation that overflowed to inf, or a nan, is left out rather than failing the
    recording; all zeros where none is finite).

    >>> hist(torch.tensor([0.0, 1.0, float("inf"), float("nan")]), bins=2).tolist()
    [1.0, 1.0]
    """
    values = _ordered(tensor).cpu()
    return torch.histc(values[values.isfinite()], bins=bins)


STATS: dict[str, Stat] = {
    "full": full, "mean": mean, "std": std, "min": min, "max": max, "absmax": absmax,
    "l2": l2, "rms": rms, "nonzero": nonzero, "dead": dead, "hist": hist,
}


class Keeper:
    """One statistic as a probe applies it: ``keeper(key, tensor, memory)``. ``key`` names
    the record (probe number, module, call index, site, path, statistic) and ``memory`` is
    a dict the store keeps for statistics that remember; a keeper holds no state of its
    own, so one probe can serve several recorders."""

    def __init__(self, name: str, function: Stat) -> None:
        self.name, self.function = name, function

    def __call__(self, key: Hashable, tensor: torch.Tensor,
                 memory: dict[Hashable, torch.Tensor]) -> torch.Tensor:
        return self.function(tensor)


class Cosine(Keeper):
    """The cosine between a value and the one the same record had before (monitorch's
    correlation of consecutive gradients); ``nan`` the first time or when shapes differ."""

    def __init__(self) -> None:
        super().__init__("cosine", _float)

    def __call__(self, key: Hashable, tensor: torch.Tensor,
                 memory: dict[Hashable, torch.Tensor]) -> torch.Tensor:
        current = _float(tensor).flatten().clone()
        before = memory.get(key)
        memory[key] = current
        if before is None or before.shape != current.shape:
            return current.new_tensor(float("nan"))
        return torch.nn.functional.cosine_similarity(before, current, dim=0)


def keepers(keep: Union[str, Stat, Sequence[Union[str, Stat]]]) -> list[Keeper]:
    """The keepers for a probe's ``keep``: a name, a callable, or a list of them.

    >>> keepers(3)
    Traceback (most recent call last):
    TypeError: keep must be a statistic's name, a callable or a list of them, got 3
    """
    if isinstance(keep, str) or callable(keep):
        items = [keep]
    elif isinstance(keep, (list, tuple)):
        items = list(keep)
    else:
        raise TypeError(f"keep must be a statistic's name, a callable or a list of them, "
                        f"got {keep!r}")
    if not all(isinstance(item, str) or callable(item) for item in items):
        raise TypeError(f"keep must be a statistic's name, a callable or a list of them, "
                        f"got {keep!r}")
    if not items:
        raise ValueError("keep must name at least one statistic")
    found = []
    for item in items:
        if callable(item):
            found.append(Keeper(getattr(item, "__name__", "custom"), item))
        elif item == "cosine":
            found.append(Cosine())
        elif item in STATS:
            found.append(Keeper(item, STATS[item]))
        else:
            raise ValueError(f"unknown statistic: {item!r} (must be a callable or one of "
                             f"{sorted([*STATS, 'cosine'])})")
    return found
