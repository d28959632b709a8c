"""Where a forward's top-level call runs, when its frames are gone (a forward no hook ends), and
where it ends after the module's own forward hooks."""

from __future__ import annotations

import weakref
from types import FrameType
from typing import Any, Callable, Optional

import torch

from torchgraphrec._torch import GLOBAL_FORWARD_HOOKS_TAKE_KWARGS, call_token, current_frame
from torchgraphrec.capture.ownhooks import OwnHook, call_ended

__all__ = ["RootCall", "RootEnd"]

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


class RootEnd:
    """The end of a forward whose top-level module has forward hooks of its own.

    PyTorch runs the global forward hooks, the recorder's among them, before a module's
    own; a hook of the user's on the model itself may then run ops and return another
    output. For such a call a hook of the recorder's own goes on the module last, and
    ``on_end(module, args, kwargs, output, raised)`` ends the call there, with the output
    the call returns. The hook stays registered until the next forward begins or
    :meth:`release`: where a hook raised, torch goes on through the module's live table
    of hooks, which no hook may change meanwhile.

    >>> ended = []
    >>> model = torch.nn.Identity()
    >>> _ = model.register_forward_hook(lambda module, args, output: output * 2)
    >>> end = RootEnd(lambda module, args, *rest: ended.append(rest[-1]))
    >>> end.begin(model)
    >>> model(torch.ones(1)), ended
    (tensor([2.]), [tensor([2.])])
    >>> end.release(); len(model._forward_hooks)
    1
    """

    __slots__ = ("pending", "_spent", "_on_end")

    def __init__(self, on_end: Callable[..., None]) -> None:
        self.pending: Optional[Any] = None  # the handle of the hook this forward ends in
        self._spent: list[Any] = []
        self._on_end = on_end

    def begin(self, module: torch.nn.Module) -> None:
        """A forward's top-level call of ``module`` begins."""
        self.release()
        # before torch takes keyword arguments in global hooks, a hook of the recorder's
        # own on every module ends its calls, registered after the user's
        if GLOBAL_FORWARD_HOOKS_TAKE_KWARGS and module._forward_hooks:
            self.pending = module.register_forward_hook(OwnHook(self._ended),
                                                        with_kwargs=True, always_call=True)

    def drop(self) -> None:
        """The forward ended otherwise (cut short): its hook ends nothing."""
        if self.pending is not None:
            self._spent.append(self.pending)
            self.pending = None

    def release(self) -> None:
        """Take the hooks off the modules."""
        self.drop()
        while self._spent:
            self._spent.pop().remove()

    def _ended(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if self.pending is None:
            return
        self.drop()
        call_ended(self._on_end, module, args, kwargs, output, _frame())
