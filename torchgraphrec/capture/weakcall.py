"""Callbacks to an owner through a weak reference, so that its parts hold no cycle with it."""

from __future__ import annotations

import weakref
from typing import Any, Callable

__all__ = ["weak_method"]


def weak_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (a bound method) called through a weak reference to its object; once the
    object is gone, a call does nothing and returns ``None``.

    A recorder's part that calls back its owner (the call tracker its capture, at each
    forward's end) would otherwise form a reference cycle with it: after the recording, the
    model (its parameters on a GPU among them) would outlive the user's last reference to
    it until the cyclic collector ran. Only for calls off the hot path: each costs a
    dereference.

    >>> class Owner:
    ...     def hello(self, name):
    ...         return f"hello {name}"
    >>> owner = Owner()
    >>> call = weak_method(owner.hello)
    >>> call("you")
    'hello you'
    >>> del owner
    >>> call("you") is None
    True
    """
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args, **kwargs)

    call.__name__ = call.__qualname__ = f"weak {method.__qualname__}"
    return call
