"""PyTorch's in-a-dispatch-mode flags, kept true where a mode leaves from under others."""

from __future__ import annotations

from typing import Any, Callable, Optional

from torch.utils import _python_dispatch

__all__ = ["DISPATCH_FLAGS", "restack_dispatch_flags"]

# Each flag torch keeps while dispatch modes are entered: (its global in
# torch.utils._python_dispatch, where each mode keeps the values it found as it entered,
# what entering a mode makes of it). Torch 2.4 keeps one flag, each mode one old value.
_Rule = Callable[[bool, Any], bool]
_FLAGS: tuple[tuple[str, str, _Rule], ...] = (
    ("_is_in_torch_dispatch_mode", "old_dispatch_mode_flags", lambda was, mode: True),
    ("_is_in_non_infra_torch_dispatch_mode", "old_non_infra_dispatch_mode_flags",
     lambda was, mode: was or not mode.is_infra_mode()),
    ("_is_in_any_mode_without_ignore_compile_internals",
     "old_without_ignore_compile_internals_dispatch_mode_flags",
     lambda was, mode: was or not mode.ignore_compile_internals()),
)
_SINGLE = ("_is_in_torch_dispatch_mode", "old_dispatch_mode_flag")  # torch 2.4

#: The flags this torch keeps, as ``(global, per-mode stack, rule)`` (empty on torch 2.4,
#: which keeps one flag, each mode one old value of it).
DISPATCH_FLAGS: tuple[tuple[str, str, _Rule], ...] = tuple(
    flag for flag in _FLAGS if hasattr(_python_dispatch, flag[0])) if hasattr(
    _python_dispatch.TorchDispatchMode, "_lazy_init_old_dispatch_mode_flags") else ()
_COMPILE_FLAG = _FLAGS[2][0]
#: Where torch mirrors the last flag in C++ for dynamo's guards (newer releases).
_set_compile_flag: Optional[Callable[[bool], None]] = getattr(
    _python_dispatch, "set_is_in_mode_without_ignore_compile_internals", None) \
    if any(flag[0] == _COMPILE_FLAG for flag in DISPATCH_FLAGS) else None


def restack_dispatch_flags(above: list) -> None:
    """Make torch's flags true again after a mode left from under the modes ``above`` (the
    ones entered after it, innermost first), which stay entered.

    Torch keeps in each mode the flags it found as it entered, and a mode that leaves puts
    back its own: left out of order, it clears them while the modes above it are still
    entered, and the last of those to leave sets them again for good (then
    ``is_in_torch_dispatch_mode()`` stays true with no mode entered). Replayed from the
    flags the mode put back, through the modes above in the order they were entered, the
    flags and each of those modes' old values read as if the mode had never been entered.
    """
    if not above:
        return
    if not DISPATCH_FLAGS:
        _restack_single(above)
        return
    for name, old, rule in DISPATCH_FLAGS:
        value = getattr(_python_dispatch, name)
        for mode in reversed(above):
            found = getattr(mode, old, None)
            if found:  # the value it found as it entered last: ours, now gone
                found[-1] = value
            value = rule(value, mode)
        setattr(_python_dispatch, name, value)
    if _set_compile_flag is not None:
        _set_compile_flag(getattr(_python_dispatch, _COMPILE_FLAG))


def _restack_single(above: list) -> None:
    name, old = _SINGLE
    if not hasattr(_python_dispatch, name):
        return
    value = getattr(_python_dispatch, name)
    for mode in reversed(above):
        if hasattr(mode, old):
            setattr(mode, old, value)
        value = True
    setattr(_python_dispatch, name, value)
