"""Checks of what a user hands the recorder: each wrong value is refused with an error that
names the option, before anything is attached."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import torch
from torch import nn

from torchgraphrec.inputs import example_inputs
from torchgraphrec.probes.probe import Probe

__all__ = ["check_model", "check_flag", "check_probes", "check_memory_limit", "check_save_dir",
           "as_args", "as_kwargs", "made_args"]


def check_model(model: Any) -> nn.Module:
    """Return ``model`` if it can be recorded, else raise a ``TypeError`` saying why."""
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError(
            f"cannot record a torch.jit.ScriptModule ({type(model).__name__}): scripted "
            "modules run no Python hooks; record the original nn.Module instead")
    if type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
        raise TypeError(
            "cannot record a torch.compile'd module: compiled code runs no per-module hooks "
            "and would be traced with them; record the original module (model._orig_mod)")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got "
                        f"{type(model).__name__}: {model!r}"[:200])
    return model


def check_flag(name: str, value: Any) -> bool:
    """``value`` as the bool an on/off option takes, or a ``TypeError`` (a string such as
    ``"no"`` would otherwise switch the option on).

    >>> check_flag("backward", 1), check_flag("flops", False)
    (True, False)
    >>> check_flag("backward", "no")
    Traceback (most recent call last):
    TypeError: backward must be True or False, got 'no'
    """
    if isinstance(value, bool) or (type(value) is int and value in (0, 1)) \
            or type(value).__name__ == "bool_":  # NumPy's
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}"[:200])


def check_probes(probes: Any) -> tuple[Probe, ...]:
    """``probes`` as a tuple: any iterable of :func:`~torchgraphrec.probe` results.

    >>> check_probes(None)
    Traceback (most recent call last):
    TypeError: probes must be a list of torchgraphrec.probe() results, got None
    """
    found = tuple(probes) if isinstance(probes, Iterable) and \
        not isinstance(probes, (Probe, str)) else None
    if found is None or not all(isinstance(p, Probe) for p in found):
        raise TypeError(f"probes must be a list of torchgraphrec.probe() results, got "
                        f"{probes!r}"[:300])
    return found


def check_memory_limit(memory_limit: Any) -> Optional[int]:
    """``memory_limit`` if it is ``None`` or a number of bytes.

    >>> check_memory_limit(-5)
    Traceback (most recent call last):
    ValueError: memory_limit must be None or a number of bytes (an int >= 0), got -5
    """
    if memory_limit is not None and (type(memory_limit) is not int or memory_limit < 0):
        raise ValueError(f"memory_limit must be None or a number of bytes (an int >= 0), "
                         f"got {memory_limit!r}")
    return memory_limit


def check_save_dir(save_dir: Any) -> Any:
    """``save_dir`` if it is ``None``, a str or a path.

    >>> check_save_dir(123)
    Traceback (most recent call last):
    TypeError: save_dir must be None, a str or a path, got 123
    """
    if save_dir is not None and not isinstance(save_dir, (str, os.PathLike)):
        raise TypeError(f"save_dir must be None, a str or a path, got {save_dir!r}")
    return save_dir


def as_args(args: Any) -> tuple:
    """``record()``'s ``args`` as the positional arguments of the call: one tensor, or a tuple.

    >>> as_args(torch.ones(1)), as_args(())
    ((tensor([1.]),), ())
    """
    if isinstance(args, torch.Tensor):
        return (args,)
    if isinstance(args, tuple):
        return args
    raise TypeError(f"args must be a tensor or a tuple of arguments, got "
                    f"{type(args).__name__}: {args!r}"[:300])


def as_kwargs(kwargs: Any) -> dict:
    """``record()``'s ``kwargs`` as the keyword arguments of the call (``None``: none).

    >>> as_kwargs(None), as_kwargs({"mask": None})
    ({}, {'mask': None})
    >>> as_kwargs({0: None})
    Traceback (most recent call last):
    TypeError: kwargs' keys must be the names of keyword arguments (str), got int: 0
    """
    if kwargs is None:
        return {}
    if isinstance(kwargs, Mapping):
        for key in kwargs:
            if not isinstance(key, str):
                raise TypeError(f"kwargs' keys must be the names of keyword arguments (str), "
                                f"got {type(key).__name__}: {key!r}"[:300])
        return dict(kwargs)
    raise TypeError(f"kwargs must be a mapping of keyword arguments or None, got "
                    f"{type(kwargs).__name__}: {kwargs!r}"[:300])


def made_args(model: nn.Module, args: Any, input_size: Any, dtypes: Any, device: Any) -> tuple:
    """``record()``'s positional arguments: ``args``, or the inputs ``input_size`` makes
    (see :func:`~torchgraphrec.inputs.example_inputs`), never both.

    >>> [tuple(x.shape) for x in made_args(torch.nn.Linear(3, 2), (), (1, 3), None, None)]
    [(1, 3)]
    >>> made_args(torch.nn.Linear(3, 2), torch.ones(1, 3), (1, 3), None, None)
    Traceback (most recent call last):
    TypeError: give the inputs as args or their shapes as input_size, not both
    """
    if input_size is None:
        if dtypes is not None or device is not None:
            raise TypeError("dtypes and device are for the inputs input_size makes: give "
                            "input_size too, or make the inputs yourself")
        return as_args(args)
    if args is not None and not (isinstance(args, tuple) and args == ()):
        raise TypeError("give the inputs as args or their shapes as input_size, not both")
    return example_inputs(input_size, dtypes, device, model)
