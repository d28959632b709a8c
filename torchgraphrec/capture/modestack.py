"""Taking one mode off torch's mode stack while the modes pushed after it stay in place."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["leave_stack"]


def leave_stack(mode: Any, modes: Callable[[], list], pop: Callable[[], Any],
                push: Callable[[Any], None]) -> None:
    """Take ``mode`` off its stack (``modes`` lists it, ``pop``/``push`` change it); the modes
    above it are taken off meanwhile and put back, so that they stay in place.

    >>> stack = ["user's mode", "recorder", "pushed since"]
    >>> leave_stack("recorder", lambda: stack, stack.pop, stack.append)
    >>> stack
    ["user's mode", 'pushed since']
    >>> leave_stack("recorder", lambda: stack, stack.pop, stack.append)  # off already
    >>> len(stack)
    2
    """
    if not any(found is mode for found in modes()):
        return
    above = []
    while True:
        found = pop()
        if found is mode:
            break
        above.append(found)
    for other in reversed(above):
        push(other)
