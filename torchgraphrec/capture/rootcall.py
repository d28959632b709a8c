"""Where a forward's top-level call runs, when its frames are gone (a forward no hook ends), and
where it ends after the module's own forward hooks."""

from __future__ import annotations

import threading
import weakref
from types import FrameType
from typing import Any, Callable, Optional

import torch

from torchgraphrec._torch import call_token, current_frame
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
    where the call returned, the global hook :meth:`defers` to it: it hands ``on_end`` the
    call's end with the output the call returns, as torch hands a global hook one (see
    ``call_ended``). Where the forward raised, the global hook ends the call and the hook
    comes off at once, before torch walks the module's live table of hooks (a hook of the
    user's may take itself off there, which a hook after it would turn into an error).
    Otherwise it comes off as the next forward begins, or at :meth:`release`. Not
    ``wanted`` where the recorder's post-hooks are each module's own, registered after the
    user's (before torch's global hooks took keyword arguments).

    >>> ended = []
    >>> model = torch.nn.Identity()
    >>> _ = model.register_forward_hook(lambda module, args, output: output * 2)
    >>> end = RootEnd(lambda module, args, *rest: ended.append(rest[-1]))
    >>> end.begin(model)
    >>> end.defers(model, returned=True)  # as the global hook would
    True
    >>> model(torch.ones(1)), ended
    (tensor([2.]), [tensor([2.])])
    >>> end.release(); len(model._forward_hooks)
    1
    """

    __slots__ = ("pending", "_deferred", "_thread", "_spent", "_on_end", "_wanted")

    def __init__(self, on_end: Callable[..., None], wanted: bool = True) -> None:
        self.pending: Optional[Any] = None  # the handle of the hook this forward may end in
        self._deferred = False  # the global hook left the end to it
        self._thread = -1
        self._spent: list[Any] = []
        self._on_end = on_end
        self._wanted = wanted

    def begin(self, module: torch.nn.Module) -> None:
        """A forward's top-level call of ``module`` begins (on the recording thread)."""
        self.release()
        if self._wanted and module._forward_hooks:
            self._thread = threading.get_ident()
            self.pending = module.register_forward_hook(OwnHook(self._ended),
                                                        with_kwargs=True, always_call=True)

    def defers(self, module: torch.nn.Module, returned: bool) -> bool:
        """Whether the top-level call of ``module`` ends in the hook, not in the global
        hook asking: where it returned and the hook is still on the module (a hook of the
        user's may have cleared the table)."""
        handle, self.pending = self.pending, None
        if returned and handle.id in module._forward_hooks:
            self.pending, self._deferred = handle, True
            return True
        handle.remove()
        return False

    def drop(self) -> None:
        """The forward ended otherwise (cut short): its hook ends nothing."""
        if self.pending is not None:
            self._spent.append(self.pending)
            self.pending = None
        self._deferred = False

    def release(self) -> None:
        """Take the hooks off the modules."""
        self.drop()
        while self._spent:
            self._spent.pop().remove()

    def _ended(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        # only the deferred call: not one of the model calling itself inside it, nor a call
        # in another thread
        if not self._deferred or threading.get_ident() != self._thread:
            return
        self.drop()
        call_ended(self._on_end, module, args, kwargs, output, _frame())
