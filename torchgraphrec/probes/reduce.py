"""Reducing a probe's entries over calls: keep all, the last, a sum, running moments, or a fold."""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch

__all__ = ["REDUCTIONS", "Reduction", "Reducer", "Entries", "make_reducer", "nbytes_of"]

Reduction = Union[str, Callable[[Any, Any], Any]]
REDUCTIONS = ("all", "last", "sum", "running")


class Reducer:
    """Accumulates the values one record key receives, call after call."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, value: torch.Tensor) -> None:
        self.count += 1
        self._add(value)

    def _add(self, value: torch.Tensor) -> None:
        raise NotImplementedError

    def result(self) -> Any:
        raise NotImplementedError

    def nbytes(self) -> int:
        """The bytes of the tensors it holds (what ``memory_limit`` counts)."""
        raise NotImplementedError


def nbytes_of(value: Any) -> int:
    """The bytes of ``value``'s elements if it is a tensor, else 0."""
    return value.element_size() * value.numel() if isinstance(value, torch.Tensor) else 0


class Entries(Reducer):
    """Every value, each at the position of its call (``None`` at the positions of the
    calls it has no value for): the values of one call share a position across keys."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[Optional[torch.Tensor]] = []

    def _add(self, value: torch.Tensor) -> None:
        self.values.append(value)

    def holds(self, position: int) -> bool:
        return position < len(self.values) and self.values[position] is not None

    def put(self, position: int, value: torch.Tensor) -> None:
        """Keep ``value`` at ``position`` (a call's, given by the store)."""
        self.count += 1
        self.values.extend([None] * (position + 1 - len(self.values)))
        self.values[position] = value

    def result(self) -> list[Optional[torch.Tensor]]:
        return list(self.values)

    def nbytes(self) -> int:
        return sum(nbytes_of(value) for value in self.values)


class _Fold(Reducer):
    def __init__(self, combine: Callable[[Any, Any], Any]) -> None:
        super().__init__()
        self.combine, self.value = combine, None

    def _add(self, value: torch.Tensor) -> None:
        self.value = value if self.count == 1 else self.combine(self.value, value)

    def result(self) -> Any:
        return self.value

    def nbytes(self) -> int:
        return nbytes_of(self.value)


class _Running(Reducer):
    """Welford's running mean and variance, with elementwise min and max."""

    def __init__(self) -> None:
        super().__init__()
        self.mean = self.m2 = self.low = self.high = None

    def _add(self, value: torch.Tensor) -> None:
        value = value.double()
        if self.count == 1:
            self.mean, self.m2 = value.clone(), torch.zeros_like(value)
            self.low, self.high = value.clone(), value.clone()
            return
        delta = value - self.mean
        self.mean = self.mean + delta / self.count
        self.m2 = self.m2 + delta * (value - self.mean)
        self.low, self.high = torch.minimum(self.low, value), torch.maximum(self.high, value)

    def result(self) -> dict[str, Any]:
        var = self.m2 / (self.count - 1) if self.count > 1 else torch.full_like(self.mean, float("nan"))
        return {"mean": self.mean, "var": var, "min": self.low, "max": self.high,
                "count": self.count}

    def nbytes(self) -> int:
        return 4 * nbytes_of(self.mean)  # mean, m2, low and high


def make_reducer(reduce: Reduction) -> Reducer:
    """A fresh reducer for ``reduce``.

    >>> import torch
    >>> reducer = make_reducer("running")
    >>> for v in (1.0, 2.0, 6.0):
    ...     reducer.add(torch.tensor(v))
    >>> {k: float(v) for k, v in reducer.result().items()}
    {'mean': 3.0, 'var': 7.0, 'min': 1.0, 'max': 6.0, 'count': 3.0}
    """
    if callable(reduce):
        return _Fold(reduce)
    return {"all": Entries, "last": lambda: _Fold(lambda _old, new: new),
            "sum": lambda: _Fold(torch.add), "running": _Running}[reduce]()
