"""ModeAside moves a dispatch mode on the dispatch stack, never leaving or entering it again."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _python_dispatch as python_dispatch

from torchgraphrec._torch import TorchDispatchMode, dispatch_modes
from torchgraphrec.capture.flops.aside import ModeAside


class _Counting(TorchDispatchMode):
    """Notes the ATen ops it sees and how often it was entered and left."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.entered = self.left = 0

    def __enter__(self) -> Any:
        self.entered += 1
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.left += 1
        super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_it_sets_aside_only_the_top_of_the_stack_and_puts_it_back() -> None:
    flop, user = _Counting(), _Counting()
    aside = ModeAside(flop)
    with flop:
        with user:
            assert not aside.set_aside()  # another mode above it: it stays
        assert aside.set_aside() and aside.depth == 0 and dispatch_modes() == []
        assert python_dispatch.is_in_torch_dispatch_mode()  # PyTorch's flags as they were
        torch.ones(2).add(1)
        assert aside.run_under(torch.mm, torch.ones(2, 2), torch.ones(2, 2)).shape == (2, 2)
        aside.put_back()
        assert dispatch_modes() == [flop]
        torch.ones(2).mul(2)
    assert flop.seen.count("add") == 0 and flop.seen.count("mm") == 1 and "mul" in flop.seen
    assert (flop.entered, flop.left) == (1, 1)  # moved, never entered or left again


def test_a_mode_entered_while_it_is_aside_stays_on_top() -> None:
    flop, user = _Counting(), _Counting()
    aside = ModeAside(flop)
    flop.__enter__()
    aside.set_aside()
    user.__enter__()
    assert aside.depth != len(dispatch_modes())  # what the op mode checks once per op
    aside.put_back()
    assert dispatch_modes() == [flop, user]
    user.__exit__(None, None, None)
    flop.__exit__(None, None, None)
    assert dispatch_modes() == []


def test_leave_exits_it_from_under_a_mode_a_user_never_left() -> None:
    flop, user = _Counting(), _Counting()
    aside = ModeAside(flop)
    flop.__enter__()
    user.__enter__()
    aside.leave()
    assert dispatch_modes() == [user] and (flop.entered, flop.left) == (1, 1)
    # PyTorch's flags say a mode is entered while the user's is (its own exit cleared them)
    assert python_dispatch.is_in_torch_dispatch_mode()
    user.__exit__(None, None, None)
    aside.leave()  # gone already: nothing to do
    # and none once it has left (the user's exit set them again, for good)
    assert flop.left == 1 and not python_dispatch.is_in_torch_dispatch_mode()


def test_leave_puts_it_back_first_when_it_is_aside() -> None:
    flop = _Counting()
    aside = ModeAside(flop)
    flop.__enter__()
    aside.set_aside()
    aside.leave()
    assert dispatch_modes() == [] and not aside.aside and flop.left == 1
