"""Statistics a probe keeps of each tensor it sees: named ones, ``full`` copies, or callables.

Each statistic maps a tensor to a tensor (a 0-d one for scalars) and never changes its input.
Integer and bool tensors are read as floats. Scalars are computed and answered in float32 or
better (a float16 or bfloat16 tensor's sums and squares overflow or round in its own type);
a norm whose squares overflow or vanish in float32 is computed again scaled by the largest
magnitude, on the CPU (elsewhere that check would wait for the device). A statistic is *undefined* where it
has no value: of an empty tensor (``mean``, ``std``, ``min``, ``max``, ``absmax``, ``rms``,
``nonzero``, ``dead``), ``std`` of one element; its value then reads ``nan``, and reductions
over calls leave it out (see :class:`Keeper`).

>>> x = torch.tensor([[3.0, -4.0], [0.0, 0.0]])
>>> float(rms(x)), float(l2(x)), float(absmax(x)), float(nonzero(x)), float(dead(x))
(2.5, 5.0, 4.0, 0.5, 0.75)
>>> float(max(torch.empty(0))), float(rms(torch.full((4,), 300.0, dtype=torch.float16)))
(nan, 300.0)
>>> mean(torch.ones(3, dtype=torch.bfloat16)).dtype, float(l2(torch.full((3,), 1e20))) / 1e20
(torch.float32, 1.7320508...)
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Hashable, Optional, Sequence, Union

import torch

__all__ = ["STATS", "Stat", "Keeper", "Cosine", "Custom", "keepers", "undefined", "full",
           "full_on", "mean", "std", "min", "max", "absmax", "l2", "rms", "nonzero", "dead",
           "hist", "holds_data", "strided"]

Stat = Callable[[torch.Tensor], Any]


def _float(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.detach()
    return tensor if tensor.is_floating_point() or tensor.is_complex() else tensor.float()


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The type a statistic of ``dtype`` values is computed in: float32 or better."""
    return torch.promote_types(dtype, torch.float32)


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a detached copy on the CPU (the autograd graph is not kept). A
    value without data (the meta device, a ``FakeTensor``) is kept as such a value, its
    shape and dtype: there is nothing to copy.

    >>> full(torch.ones(2, device="meta")).device
    device(type='meta')
    """
    return _copy_to(tensor, "cpu")


def full_on(device: Union[str, torch.device]) -> Stat:
    """Like :func:`full`, but the copies go to ``device`` (``keep=stats.full_on("cuda")``);
    a value without data stays such a value, as there."""
    def full(tensor: torch.Tensor) -> torch.Tensor:
        return _copy_to(tensor, device)

    return full


def _copy_to(tensor: torch.Tensor, device: Union[str, torch.device]) -> torch.Tensor:
    """A detached copy of ``tensor`` on ``device``; of a value without data, a detached
    clone where it is (there is nothing to move)."""
    if not holds_data(tensor):
        return tensor.detach().clone()
    return tensor.detach().to(device, copy=True)


def mean(tensor: torch.Tensor) -> torch.Tensor:
    values = _float(tensor)
    return values.mean(dtype=_wide(values.dtype))


def std(tensor: torch.Tensor) -> torch.Tensor:
    values = _float(tensor)
    values = values.to(_wide(values.dtype))  # no copy of a float32 tensor
    return values.std() if values.numel() > 1 else values.new_tensor(float("nan"))


def _nan_if_empty(reduction: Callable[[torch.Tensor], torch.Tensor],
                  values: torch.Tensor) -> torch.Tensor:
    """``reduction(values)`` in float32 or better (an extreme is exact in any type; the
    answer's type is that of every statistic), or ``nan`` for an empty tensor (torch's
    ``min`` and ``max`` refuse one: an empty batch must not fail the user's forward)."""
    found = reduction(values) if values.numel() else values.new_tensor(float("nan"))
    return found.to(_wide(found.dtype))


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


def _norm(tensor: torch.Tensor, divisor: float = 1.0) -> torch.Tensor:
    """The 2-norm over ``divisor``. float16's largest value is 65504: the squares of a few
    hundred activations of a few hundred overflow it, so half types are summed in float32;
    float32's squares overflow past about 1.8e19 and vanish below about 1e-23 (a vanishing
    gradient would read 0), where the CPU's norm is computed again, scaled (a plain
    tensor's: a FakeTensor's value cannot be read)."""
    values = _float(tensor)
    norm = torch.linalg.vector_norm(values, dtype=_wide(values.dtype))
    if type(norm) is torch.Tensor and norm.is_cpu:
        found = norm.item()
        if math.isinf(found) or found == 0.0 and bool(values.any()):
            return _scaled_norm(values, divisor)
    return norm / divisor


def _scaled_norm(values: torch.Tensor, divisor: float) -> torch.Tensor:
    """The 2-norm over ``divisor`` as ``m * norm(values / m)``, ``m`` the largest magnitude:
    no square exceeds 1 (``inf`` stays where a value is infinite)."""
    magnitudes = values.abs()
    largest = magnitudes.amax().to(_wide(magnitudes.dtype))
    if not math.isfinite(largest.item()):
        return largest / divisor
    return largest * (torch.linalg.vector_norm(values.to(_wide(values.dtype)) / largest)
                      / divisor)


def l2(tensor: torch.Tensor) -> torch.Tensor:
    return _norm(tensor)


def rms(tensor: torch.Tensor) -> torch.Tensor:
    # one fused reduction: pow(2).mean() makes a squared copy of every activation first
    count = tensor.numel()
    return _norm(tensor, math.sqrt(count) if count else math.nan)


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
    recording; all zeros where none is finite), binned and counted in float64: a float16's
    range overflows its own type, a bfloat16's counts stop at 256, and float32's round
    past 2**24. A tensor without data (meta, a ``FakeTensor``) reads ``nan`` in every bin.

    >>> hist(torch.tensor([0.0, 1.0, float("inf"), float("nan")]), bins=2).tolist()
    [1.0, 1.0]
    >>> hist(torch.tensor([-60000.0, 60000.0], dtype=torch.float16), bins=2).tolist()
    [1.0, 1.0]
    """
    values = _ordered(tensor)
    if not holds_data(values):
        return values.new_full((bins,), math.nan, dtype=torch.float64)
    values = values.to("cpu", torch.float64)
    return torch.histc(values[values.isfinite()], bins=bins)


_SPARSE = frozenset({torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr,
                     torch.sparse_bsc})


def strided(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as the named statistics read it: a sparse one (``Embedding(sparse=True)``'s
    gradient) made dense, its zeros counted as every dense tensor's are.

    >>> grad = torch.sparse_coo_tensor([[1]], [4.0], (4,))
    >>> float(rms(strided(grad))), float(nonzero(strided(grad)))
    (2.0, 0.25)
    """
    return tensor.to_dense() if tensor.layout in _SPARSE else tensor


def holds_data(value: torch.Tensor) -> bool:
    """Whether ``value`` has data to read: a meta tensor has none, nor has a ``FakeTensor``
    (a meta tensor underneath, whatever device it reports).

    >>> holds_data(torch.zeros(1)), holds_data(torch.zeros(1, device="meta"))
    (True, False)
    """
    try:
        return value.untyped_storage().device.type != "meta"
    except (RuntimeError, NotImplementedError):  # a subclass without storage of its own
        return True


STATS: dict[str, Stat] = {
    "full": full, "mean": mean, "std": std, "min": min, "max": max, "absmax": absmax,
    "l2": l2, "rms": rms, "nonzero": nonzero, "dead": dead, "hist": hist,
}

#: The fewest elements each named statistic has a value for (the others have one for any).
_LEAST = {"mean": 1, "std": 2, "min": 1, "max": 1, "absmax": 1, "rms": 1, "nonzero": 1,
          "dead": 1}


def undefined() -> torch.Tensor:
    """What a statistic reads where it is undefined for a tensor (too few elements): ``nan``."""
    return torch.tensor(math.nan)


class Keeper:
    """One statistic as a probe applies it: ``keeper(key, tensor, memory)``. ``key`` names
    the record (probe number, module, call position, site, path, statistic) and ``memory``
    is a dict the store keeps for statistics that remember; a keeper holds no state of its
    own, so one probe can serve several recorders.

    Where the statistic is undefined for ``tensor`` (too few elements), ``keeper(...)``
    answers ``nan`` and :meth:`apply`, which the store calls, ``None``: a reduction over
    calls leaves that call out, where a ``nan`` of the data (a NaN the model made) is folded
    in, and shows.

    >>> keeper = Keeper("std", std, least=2)
    >>> keeper.apply(0, torch.ones(1), {}) is None, float(keeper(0, torch.ones(1), {}))
    (True, nan)
    >>> float(keeper(0, torch.tensor([1.0, 3.0]), {}))
    1.4142135381698608
    """

    def __init__(self, name: str, function: Stat, least: int = 0,
                 takes_any_layout: bool = False) -> None:
        self.name, self.function, self.least = name, function, least
        #: whether it is given a sparse tensor as it is (``full`` keeps it so), not dense
        self.takes_any_layout = takes_any_layout

    def __call__(self, key: Hashable, tensor: torch.Tensor,
                 memory: dict[Hashable, torch.Tensor]) -> torch.Tensor:
        found = self.apply(key, tensor, memory)
        return undefined() if found is None else found

    def apply(self, key: Hashable, tensor: torch.Tensor,
              memory: dict[Hashable, torch.Tensor]) -> Optional[torch.Tensor]:
        """The statistic's value, or ``None`` where it is undefined for ``tensor``."""
        if self.least and tensor.numel() < self.least:
            return None
        return self.function(tensor)


class Custom(Keeper):
    """A callable's statistic (tensor_tracker's ``stash_value``). A Python number is kept
    as a 0-d tensor (float64 for a float); a tensor that holds on to more memory than its
    own elements (a view of the activation, which a later in-place op would rewrite and
    which keeps the whole activation alive) is kept as a copy; anything else is refused.

    >>> Custom("top", lambda t: t.max().item())(0, torch.tensor([1.5, 2.5]), {})
    tensor(2.5000, dtype=torch.float64)
    >>> x = torch.arange(1.0, 5.0)
    >>> kept = Custom("first", lambda t: t[:1])(0, x, {})
    >>> _ = x.zero_(); kept  # an in-place op on the activation, after it was kept
    tensor([1.])
    >>> kept = Custom("first", lambda t: t[1:2])(0, torch.arange(4.0), {})
    >>> kept.untyped_storage().nbytes()
    4
    """

    def __init__(self, name: str, function: Stat) -> None:
        super().__init__(name, function, takes_any_layout=True)  # the user's: as it came

    def apply(self, key: Hashable, tensor: torch.Tensor,
              memory: dict[Hashable, torch.Tensor]) -> Optional[torch.Tensor]:
        found = self.function(tensor)
        if isinstance(found, torch.Tensor):
            return found.clone() if _holds_more(found, tensor) else found
        if isinstance(found, numbers.Number):
            return torch.tensor(found, dtype=torch.float64 if isinstance(found, float) else None)
        # the store's key: (probe number, module, call position, site, path, statistic)
        where = f" at {key[1:4:2]!r}" if isinstance(key, tuple) and len(key) == 6 else ""
        raise TypeError(f"keep={self.name!r} returned {type(found).__name__} {found!r:.60}"
                        f"{where}; a statistic returns a tensor or a Python number")


def _holds_more(found: torch.Tensor, tensor: torch.Tensor) -> bool:
    """Whether ``found`` shares ``tensor``'s memory or holds a larger storage than its own
    elements (what ``memory_limit`` counts of it)."""
    try:
        storage = found.untyped_storage()
        return (storage.nbytes() > found.numel() * found.element_size()
                or storage.data_ptr() == tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a subclass without storage of its own
        return False


class Cosine(Keeper):
    """The cosine between a value and the one the same record had in the previous forward
    (monitorch's correlation of consecutive gradients); undefined (``nan``) the first time,
    when shapes differ, and for an empty tensor (which is not remembered: the next value is
    compared with the one before it). It is computed in float32 or better with each vector
    scaled by its largest magnitude (no square overflows), and is 0 where one vector is
    zero, as in ``torch.nn.functional.cosine_similarity``.

    >>> cosine, memory, x = Cosine(), {}, torch.full((3,), 1e4, dtype=torch.float16)
    >>> float(cosine(0, x, memory)), float(cosine(0, x, memory))
    (nan, 1.0)
    >>> cosine.apply(0, torch.empty(0), memory) is None, float(cosine(0, -x, memory))
    (True, -1.0)
    """

    def __init__(self) -> None:
        super().__init__("cosine", _float)

    def apply(self, key: Hashable, tensor: torch.Tensor,
              memory: dict[Hashable, torch.Tensor]) -> Optional[torch.Tensor]:
        if not tensor.numel():
            return None
        current = _float(tensor).flatten().clone()
        before = memory.get(key)
        memory[key] = current
        if before is None or before.shape != current.shape:
            return None
        return _cosine(before, current)


def _cosine(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The cosine of two flat tensors of one shape, each scaled first (see :func:`_unit`)."""
    wide = _wide(torch.promote_types(first.dtype, second.dtype))
    first, second = _unit(first, wide), _unit(second, wide)
    norms = torch.linalg.vector_norm(first) * torch.linalg.vector_norm(second)
    # a zero vector's norm is 0, and so is its dot product: 0 / eps, as torch answers
    return (torch.vdot(first, second).real / norms.clamp_min(1e-8)).clamp(-1.0, 1.0)


def _unit(values: torch.Tensor, wide: torch.dtype) -> torch.Tensor:
    """``values`` in ``wide``, divided by their largest magnitude (zeros stay zeros)."""
    values = values.to(wide)
    largest = values.abs().amax()
    return values / largest.clamp_min(torch.finfo(largest.dtype).tiny)


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
    found: list[Keeper] = []
    for item in items:
        if callable(item):
            found.append(Custom(getattr(item, "__name__", "custom"), item))
        elif item == "cosine":
            found.append(Cosine())
        elif item in STATS:
            found.append(Keeper(item, STATS[item], _LEAST.get(item, 0),
                                takes_any_layout=item == "full"))
        else:
            raise ValueError(f"unknown statistic: {item!r} (must be a callable or one of "
                             f"{sorted([*STATS, 'cosine'])})")
    names = [keeper.name for keeper in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # a statistic's name keys its records: two would be folded into one
        raise ValueError(f"keep names {twice[0]!r} twice: a statistic's name keys its "
                         f"records, so give each callable a name of its own (a def, not "
                         f"a lambda or a functools.partial)")
    return found
