"""Where the probes' own torch calls run: seen by no mode, the user's or the recorder's."""

from __future__ import annotations

from typing import Any

from torchgraphrec._torch import DisableTorchFunction, disable_dispatch_modes, \
    dispatch_mode_depth

__all__ = ["Unseen"]


class Unseen:
    """A context in which no mode of the user's sees the probes' own torch calls (their
    statistics, copies and hooks): torch functions disabled, and the dispatch modes stepped
    aside where there are any (a user's ``FlopCounterMode`` would count a probe's norms).
    One per engine, entered again inside itself where a statistic runs in a hook."""

    __slots__ = ("_functions", "_dispatch")

    def __init__(self) -> None:
        self._functions = DisableTorchFunction()
        self._dispatch: list[Any] = []

    def __enter__(self) -> None:
        self._functions.__enter__()
        aside = disable_dispatch_modes() if dispatch_mode_depth() else None
        if aside is not None:
            aside.__enter__()
        self._dispatch.append(aside)

    def __exit__(self, *exc: Any) -> None:
        aside = self._dispatch.pop()
        if aside is not None:
            aside.__exit__(*exc)
        self._functions.__exit__(*exc)
