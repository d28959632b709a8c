"""Where a forward's top-level call runs, and when its frames are gone: a forward no hook ends."""

from __future__ import annotations

import weakref
from types import FrameType
from typing import Any, Callable, Optional

from torchgraphrec._torch import call_token, current_frame

__all__ = ["RootCall"]

_frame = current_frame


class RootCall:
    """The frame of ``Module._call_impl`` running a forward's top-level call.

    PyTorch runs ``always_call`` hooks only for an ``Exception``, so a ``KeyboardInterrupt``
    or another ``BaseException`` the user catches inside a recorder's block ends a forward
    without any hook of the recorder's. :meth:`left_behind` tells such a forward from a
    later call, and ``on_gone`` is called as soon as the call's frames are gone (where
    torch keeps an object per call to watch: :func:`~torchgraphrec._torch.call_token`),
    so that the forward ends there. While watched, the frame is known by its id: holding
    it would keep its locals, the activations among them, alive.

    >>> ended = []
    >>> root = RootCall(lambda: ended.append(True))
    >>> root.left_behind(), ended
    (False, [])
    """

    __slots__ = ("_frame", "_watch", "_on_gone")

    def __init__(self, on_gone: Callable[[], None]) -> None:
        self._frame: FrameType | int | None = None
        self._watch: Optional[Any] = None  # a weak reference to the call's token
        self._on_gone = on_gone

    def start(self, frame: FrameType) -> None:
        """A forward's top-level call runs in ``frame`` (its pre-hook's caller)."""
        token = call_token(frame)
        self._watch = None if token is None else weakref.ref(token, self._gone)
        self._frame = frame if token is None else id(frame)

    def clear(self) -> None:
        """No forward runs (it ended, or recording stopped): nothing is watched."""
        self._frame = self._watch = None

    def left_behind(self) -> bool:
        """Whether the forward was cut short: its top-level call's frame is no longer among
        the callers of the hook asking."""
        root = self._frame
        if root is None:
            return False
        frame = _frame()
        while frame is not None:
            if (id(frame) if type(root) is int else frame) == root:
                return False
            frame = frame.f_back
        return True

    def _gone(self, watch: Any) -> None:
        if watch is not self._watch:  # a forward that ended, or a recorder stopped
            return
        self.clear()
        self._on_gone()
