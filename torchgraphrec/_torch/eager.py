"""Compiled code run eagerly while a forward is recorded (``torch.compiler.set_stance``)."""

from __future__ import annotations

import sys
import threading
from typing import Any, Optional

import torch

__all__ = ["SETS_STANCE", "compiled_code_eager"]

#: Whether this torch can be told to run compiled code eagerly (2.6 and later).
SETS_STANCE = hasattr(torch.compiler, "set_stance")


class compiled_code_eager:  # noqa: N801 (used like a function: ``with compiled_code_eager():``)
    """Inside the block, ``torch.compile``'d functions and modules run their eager code,
    which the recorder's hooks and op mode see op by op; after it, the stance is as it was.

    Left compiled, dynamo meets the recorder's op mode inside them: it compiles them again,
    fails to trace the mode's clock, and from then on skips their code for good, so that
    every later call of the user's runs eagerly (torch 2.6 and later). Nothing is done
    where dynamo was never imported (nothing can be compiled), nor before torch 2.6,
    which takes no stance: there turning dynamo off would mark the code it meets to be
    skipped for good.

    >>> import torch._dynamo
    >>> def stance():  # dynamo's own record of it
    ...     return torch._dynamo.eval_frame._stance.stance if SETS_STANCE else None
    >>> with compiled_code_eager():
    ...     inside = stance()
    >>> (inside, stance()) == (("force_eager", "default") if SETS_STANCE else (None, None))
    True
    """

    __slots__ = ("_entered",)

    # the stance is the process's: the first recorder's forward in sets it and the last
    # out restores it, in whatever order they end (nested recorders end a raising
    # forward outer first)
    _lock = threading.Lock()
    _depth = 0
    _before: Optional[Any] = None

    def __init__(self) -> None:
        self._entered = False

    def __enter__(self) -> None:
        if not SETS_STANCE or "torch._dynamo" not in sys.modules or self._entered:
            return
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                try:
                    cls._before = torch.compiler.set_stance("force_eager")  # set as made
                except RuntimeError:  # a recording begun inside a compiled function's
                    return  # frame, where torch takes no stance: as without one
            cls._depth += 1
        self._entered = True

    def __exit__(self, *exc_info: object) -> None:
        if not self._entered:
            return
        cls = type(self)
        with cls._lock:
            if cls._depth == 1:
                # first, so that where it fails (out of stack, deep in a model) nothing
                # has changed, and leaving again restores it
                cls._before.__exit__(None, None, None)
                cls._before = None
            cls._depth -= 1
        self._entered = False
