"""Reducing a probe's entries over calls: keep all, the last, a sum, running moments, or a fold."""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch

from torchgraphrec.probes.stats import strided

__all__ = ["REDUCTIONS", "Reduction", "Reducer", "Entries", "make_reducer", "nbytes_of",
           "FOLDED", "UNDEFINED", "OTHER_SHAPE"]

Reduction = Union[str, Callable[[Any, Any], Any]]
REDUCTIONS = ("all", "last", "sum", "running")

#: What :meth:`Reducer.add` did with a value: folded it in, or left it out because the
#: statistic was undefined for the call (``None``), or because its shape differs from the
#: record's (an elementwise fold of a smaller last batch).
FOLDED, UNDEFINED, OTHER_SHAPE = "folded", "undefined", "other_shape"


class Reducer:
    """Accumulates the values one record key receives, call after call: ``count`` values
    folded in, ``undefined`` and ``other_shape`` calls left out. A fold that raises leaves
    the reducer as it was (its counts too)."""

    #: whether values must all have one shape (an elementwise fold: ``sum``, ``running``)
    same_shape = False

    def __init__(self) -> None:
        self.count = self.undefined = self.other_shape = 0

    def add(self, value: Optional[torch.Tensor]) -> str:
        """Fold ``value`` in; returns :data:`FOLDED`, :data:`UNDEFINED` or
        :data:`OTHER_SHAPE`."""
        if value is None:
            self.undefined += 1
            return UNDEFINED
        if self.same_shape and self.count and value.shape != self.shape():
            self.other_shape += 1
            return OTHER_SHAPE
        self._add(value)
        self.count += 1  # only once the fold succeeded
        return FOLDED

    def shape(self) -> torch.Size:
        """The shape of the values folded so far."""
        raise NotImplementedError

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


def _nan() -> torch.Tensor:
    """The value of a record that no call had a value for."""
    return torch.tensor(float("nan"), dtype=torch.float64)


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

    def shape(self) -> torch.Size:
        return self.value.shape  # type: ignore[union-attr]

    def _add(self, value: torch.Tensor) -> None:
        self.value = value if not self.count else self.combine(self.value, value)

    def result(self) -> Any:
        return self.value if self.count else _nan()

    def nbytes(self) -> int:
        return nbytes_of(self.value)


class _Sum(_Fold):
    """A sum, elementwise: a value of another shape is left out (``torch.add`` would
    broadcast a batch of one into the others, or fail on any other batch)."""

    same_shape = True

    def __init__(self) -> None:
        super().__init__(torch.add)


class _Running(Reducer):
    """Welford's running mean and variance, with elementwise min and max, of dense values
    (a sparse gradient is read dense: its moments are every element's)."""

    same_shape = True

    def __init__(self) -> None:
        super().__init__()
        self.mean = self.m2 = self.low = self.high = None

    def shape(self) -> torch.Size:
        return self.mean.shape  # type: ignore[union-attr]

    def _add(self, value: torch.Tensor) -> None:
        value = strided(value).double()
        if not self.count:
            self.mean, self.m2 = value.clone(), torch.zeros_like(value)
            self.low, self.high = value.clone(), value.clone()
            return
        delta = value - self.mean
        mean = self.mean + delta / (self.count + 1)
        # a NaN of the data propagates into all four (torch.minimum and maximum keep it);
        # all are computed before any is kept, so that a failure leaves the record whole
        self.mean, self.m2, self.low, self.high = (
            mean, self.m2 + delta * (value - mean), torch.minimum(self.low, value),
            torch.maximum(self.high, value))

    def result(self) -> dict[str, Any]:
        if not self.count:
            moments = {name: _nan() for name in ("mean", "var", "min", "max")}
        else:
            var = self.m2 / (self.count - 1) if self.count > 1 else torch.full_like(
                self.mean, float("nan"))
            moments = {"mean": self.mean, "var": var, "min": self.low, "max": self.high}
        return {**moments, "count": self.count, "undefined": self.undefined,
                "other_shape": self.other_shape}

    def nbytes(self) -> int:
        return 4 * nbytes_of(self.mean)  # mean, m2, low and high


def make_reducer(reduce: Reduction) -> Reducer:
    """A fresh reducer for ``reduce``. ``count`` counts the values folded in; a value the
    statistic leaves undefined (``None``: the first cosine, the std of one element) is left
    out and counted as ``undefined``, one whose shape differs from the first's as
    ``other_shape``; a NaN of the data is folded in, and shows in all four moments.

    >>> import torch
    >>> reducer = make_reducer("running")
    >>> for v in (None, 1.0, 2.0, 6.0):
    ...     _ = reducer.add(None if v is None else torch.tensor(v))
    >>> {k: float(v) for k, v in reducer.result().items()}
    {'mean': 3.0, 'var': 7.0, 'min': 1.0, 'max': 6.0, 'count': 3.0, 'undefined': 1.0,
     'other_shape': 0.0}
    >>> reducer.add(torch.ones(2)), reducer.result()["count"]
    ('other_shape', 3)
    """
    if callable(reduce):
        return _Fold(reduce)
    return {"all": Entries, "last": lambda: _Fold(lambda _old, new: new),
            "sum": _Sum, "running": _Running}[reduce]()
