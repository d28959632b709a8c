"""Which probed call a module hook belongs to, and where a call stands within its forward."""

from __future__ import annotations

from types import FrameType
from typing import Optional

from torchgraphrec._torch import call_raised

__all__ = ["FREED", "Open", "REENTRANT", "forward_raised", "freed", "close", "Positions"]

#: Said once where a reentrant checkpoint hides gradients from the probes.
REENTRANT = ("torchgraphrec: probes cannot record grad_output or grad_input inside a reentrant "
             "checkpoint (torch.utils.checkpoint(..., use_reentrant=True)): its forward runs "
             "without gradients and is run again in the backward; checkpoint with "
             "use_reentrant=False to record them")

#: Said once where a hook before the probe's took a parameter's gradient away ({}: the
#: parameter, ``weight in 'encoder.0'``).
FREED = ("torchgraphrec: param_grad: a hook that ran before the probe's set the gradient of "
         "{} to None (an optimizer stepping in the backward?); no param_grad is recorded "
         "where that happens. Enter the Recorder before registering that hook to see the "
         "gradients")

def freed(module: str, path: str) -> str:
    """:data:`FREED` for parameter ``path`` of module ``module``.

    >>> "the gradient of weight in 'encoder.0' to None" in freed("encoder.0", "weight")
    True
    """
    return FREED.format(f"{path} in {module!r}" if module else path)


#: A probed call that has begun: its module's index, its call index, and the keyword
#: arguments dict its pre-hook was given (each call gets a dict of its own).
Open = tuple[int, int, dict]


def forward_raised(rest: tuple, hook_frame: FrameType) -> bool:
    """Whether a forward hook given ``rest`` (after the module and its args) in
    ``hook_frame`` runs for a call whose forward raised. Some torch releases give such a
    hook no keyword arguments; others (2.13) give them and ``None`` for the output, which a
    forward may also return: then no exception is passing through ``Module._call_impl``'s
    frame (see :func:`~torchgraphrec._torch.call_raised`)."""
    return len(rest) == 1 or (rest[1] is None and call_raised(hook_frame))


def close(calls: list[Open], module_index: int, kwargs: Optional[dict],
          raised: bool) -> Optional[int]:
    """The call index of the call of ``module_index`` that is ending, its entry (and any
    left above it) taken off ``calls``; ``None`` where its pre-hook never ran. A forward
    hook that always runs also runs for a call whose forward pre-hooks raised before the
    probes' own ran (a user's validation hook, the call then caught by an enclosing
    module): popping blindly would close the enclosing call in its place. ``kwargs`` are
    those the forward hook was given (``None`` where a torch release gives none).

    >>> calls = [(0, 0, {}), (1, 0, {})]
    >>> close(calls, 1, {}, raised=True), calls  # module 1's pre-hook never ran
    (None, [(0, 0, {}), (1, 0, {})])
    >>> close(calls, 1, calls[-1][2], raised=True), close(calls, 0, {}, raised=False), calls
    (0, 0, [])
    """
    for position in range(len(calls) - 1, -1, -1):
        index, call_index, seen = calls[position]
        if index == module_index:
            # a call that returned ran every pre-hook; one that raised may not have
            if raised and kwargs is not None and seen is not kwargs:
                return None
            del calls[position:]  # an entry above it is of a call that ended within it
            return call_index
    return None


class Positions:
    """Each call's position within its forward (its module's first, second... call in
    it): ``cosine`` compares a value with the same position's in the previous forward, with
    or without ``Recorder.step()``. A forward is a call of the model, or, where the model
    itself is not running, a probed call outside any other.

    >>> positions = Positions()
    >>> positions.begin({3: 5}); positions.of(3, 6), positions.of(4, 0)
    (1, 0)
    """

    __slots__ = ("start", "depth")

    def __init__(self) -> None:
        self.start: dict[int, int] = {}  # each module's calls counted when it began
        self.depth = 0  # the model's calls running (it may call itself)

    def begin(self, counts: dict[int, int]) -> None:
        self.start = dict(counts)

    def of(self, module_index: int, call_index: int) -> int:
        return call_index - self.start.get(module_index, 0)
