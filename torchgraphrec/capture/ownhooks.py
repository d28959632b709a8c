"""The recorder's hooks in a module's own tables, which a copy of the module never takes along."""

from __future__ import annotations

import functools
from types import FrameType
from typing import Any, Callable

import torch

from torchgraphrec._torch import call_raised

__all__ = ["OwnHook", "call_ended", "inert_hook"]


def inert_hook(*args: Any, **kwargs: Any) -> None:
    """What a copy of a module holds in place of the recorder's hooks: nothing happens."""
    return None


class OwnHook(functools.partial):
    """A hook the recorder registers on one module (``functools.partial``'s call, which adds
    no frame between ``Module._call_impl`` and the hook). ``copy.deepcopy``, ``pickle`` and
    ``torch.save`` of the module, which copy its hook tables, copy it as
    :func:`inert_hook`: a copy (a target network, an EMA model, a checkpoint) neither drags
    the recorder along, which cannot be copied, nor reports its calls as the original's.
    The copy keeps that inert hook: ``torch.jit.script`` refuses it, as it refuses any
    Python hook (on torch 2.4 ``torch.export`` too), and a model pickled inside a recording
    needs torchgraphrec to load. Copy the model outside the ``Recorder`` block for those.

    >>> import copy, pickle, torch
    >>> seen = []
    >>> module = torch.nn.Identity()
    >>> handle = module.register_forward_hook(OwnHook(lambda m, args, out: seen.append(m)))
    >>> twin = copy.deepcopy(module)
    >>> _ = module(torch.ones(1)), twin(torch.ones(1))
    >>> seen == [module], list(twin._forward_hooks.values()) == [inert_hook]
    (True, True)
    >>> list(pickle.loads(pickle.dumps(module))._forward_hooks.values()) == [inert_hook]
    True
    """

    __slots__ = ()

    def __deepcopy__(self, memo: dict) -> Any:
        return inert_hook

    def __reduce__(self) -> tuple:
        return _inert, ()  # unpickled by calling it: torchgraphrec is needed to load


def _inert() -> Any:
    return inert_hook


def call_ended(on_end: Callable[..., None], module: torch.nn.Module, args: tuple, kwargs: dict,
               output: Any, hook_frame: FrameType) -> None:
    """Hand ``on_end`` the end of a call, from a module's own ``always_call`` forward hook
    (with keyword arguments) running in ``hook_frame``, as torch hands a global one:
    ``(module, args, kwargs, output)``, or ``(module, args, None)`` where the call is
    unwinding an exception (raised by its forward or a hook that ran before).

    >>> import sys
    >>> ends = []
    >>> call_ended(lambda *end: ends.append(len(end)), None, (), {}, 1, sys._getframe())
    >>> ends
    [4]
    """
    if call_raised(hook_frame):
        on_end(module, args, None)
    else:
        on_end(module, args, kwargs, output)
