"""Example inputs made from their shapes, as torchinfo's and torchview's ``input_size`` makes them."""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from typing import Any, Optional, Union

import torch
from torch import nn

__all__ = ["example_inputs", "InputSize", "Dtypes"]

#: One shape (``(1, 3, 224, 224)``, a ``torch.Size``), or one per positional input.
InputSize = Union[Sequence[int], Sequence[Sequence[int]]]
#: One dtype (a ``torch.dtype`` or its name, ``"int64"``) for every input, or one per input.
Dtypes = Union[torch.dtype, str, Sequence[Union[torch.dtype, str]], None]

_SEED = 0


def example_inputs(input_size: InputSize, dtypes: Dtypes = None,
                   device: Union[torch.device, str, None] = None,
                   model: Optional[nn.Module] = None) -> tuple[torch.Tensor, ...]:
    """Random inputs of the shapes ``input_size``, one per shape: standard normal floats,
    and for integer and bool dtypes 0s and 1s (token ids any embedding takes, a mask).

    They are drawn from a generator of their own, seeded alike each time: the same inputs
    on every call and device, and the caller's random state left as it was. On the meta
    device they hold no data, and nothing is drawn.

    Args:
        input_size: one shape (whole numbers; ``()`` is one scalar input), or a sequence of
            shapes, one per positional input.
        dtypes: one dtype for every input, or one per input: a ``torch.dtype`` or its name
            (default: torch's default dtype; as in torchinfo and torchview, not the
            model's, which a ``bfloat16`` model needs given).
        device: where the inputs go (default: the device of ``model``'s first parameter
            or buffer, so that a model on the meta device gets meta inputs; else the CPU).
        model: the model the inputs are for.

    Returns:
        A tuple of tensors, in the order of the shapes.

    Raises:
        TypeError: ``input_size`` is not a shape or a sequence of shapes, or ``dtypes``
            is not a dtype, the name of one or a sequence of them.
        ValueError: a dimension is negative, or ``dtypes`` is a sequence of another length.

    >>> [tuple(x.shape) for x in example_inputs((2, 3))]
    [(2, 3)]
    >>> ids, mask = example_inputs([(1, 4), (1, 4)], dtypes=[torch.long, torch.bool])
    >>> ids.dtype, mask.dtype, set(ids.flatten().tolist()) <= {0, 1}
    (torch.int64, torch.bool, True)
    >>> torch.equal(example_inputs((2, 3))[0], example_inputs((2, 3))[0])
    True
    >>> example_inputs((4,), model=torch.nn.Linear(4, 2, device="meta"))[0].device
    device(type='meta')
    >>> example_inputs((2, -1))
    Traceback (most recent call last):
    ValueError: input_size has a negative dimension: (2, -1)
    """
    shapes = _shapes(input_size)
    kinds = _dtypes(dtypes, len(shapes))
    target = torch.device(device) if device is not None else _device_of(model)
    if target.type == "meta":  # shapes alone: a meta model's inputs may be any size
        return tuple(torch.empty(shape, dtype=dtype, device=target)
                     for shape, dtype in zip(shapes, kinds))
    generator = torch.Generator().manual_seed(_SEED)
    return tuple(_random(shape, dtype, generator).to(target) for shape, dtype in zip(shapes, kinds))


def _is_shape(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and all(
        isinstance(dim, Integral) and not isinstance(dim, bool) for dim in value)


def _shapes(input_size: Any) -> list[tuple[int, ...]]:
    """``input_size`` as a list of shapes."""
    if _is_shape(input_size):
        shapes = [tuple(map(int, input_size))]
    elif isinstance(input_size, Sequence) and not isinstance(input_size, str) and input_size \
            and all(map(_is_shape, input_size)):
        shapes = [tuple(map(int, shape)) for shape in input_size]
    else:
        raise TypeError("input_size must be a shape (whole numbers, e.g. (1, 3, 224, 224)) "
                        f"or a sequence of shapes, one per input, got {input_size!r}"[:300])
    for shape in shapes:
        if any(dim < 0 for dim in shape):
            raise ValueError(f"input_size has a negative dimension: {shape}")
    return shapes


def _dtype(value: Any) -> torch.dtype:
    found = getattr(torch, value, None) if isinstance(value, str) else value
    if not isinstance(found, torch.dtype):
        raise TypeError(f"a dtype must be a torch.dtype or the name of one (e.g. torch.int64, "
                        f"'int64'), got {value!r}")
    return found


def _dtypes(dtypes: Any, count: int) -> list[torch.dtype]:
    """One dtype per input."""
    if dtypes is None:
        return [torch.get_default_dtype()] * count
    if not isinstance(dtypes, Sequence) or isinstance(dtypes, str):
        return [_dtype(dtypes)] * count
    kinds = [_dtype(value) for value in dtypes]
    if len(kinds) != count:
        raise ValueError(f"dtypes gives {len(kinds)} dtypes for {count} input shapes: give one "
                         "per shape, or one dtype for all")
    return kinds


def _device_of(model: Optional[nn.Module]) -> torch.device:
    """The device of ``model``'s first parameter or buffer, else the CPU."""
    if model is not None:
        for tensors in (model.parameters(), model.buffers()):
            for tensor in tensors:
                return tensor.device
    return torch.device("cpu")


def _random(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    # drawn in a type every torch draws on the CPU (not float8 or, on old releases, half)
    if dtype.is_complex:
        drawn = torch.complex128 if dtype == torch.complex128 else torch.complex64
    elif dtype.is_floating_point:
        drawn = torch.float64 if dtype == torch.float64 else torch.float32
    else:
        return torch.randint(0, 2, shape, generator=generator).to(dtype)
    return torch.randn(shape, dtype=drawn, generator=generator).to(dtype)
