"""Output probes' edits: applied in turn, in the forward and where a checkpoint recomputes."""

from __future__ import annotations

from typing import Any, Iterable

from torchgraphrec.probes.probe import Probe

__all__ = ["apply_edits", "recomputed_choice"]


def apply_edits(probes: Iterable[Probe], output: Any) -> Any:
    """Each of ``probes``' edits in turn, each given what the one before returned;
    ``None`` (the output kept) where none edits.

    >>> from torchgraphrec import probe
    >>> apply_edits([probe("output", edit=lambda t: t + 1), probe("output"),
    ...              probe("output", edit=lambda t: t * 10)], 1)
    20
    >>> apply_edits([probe("output")], 1) is None
    True
    """
    edited = None
    for chosen in probes:
        if chosen.edit is not None:
            edited = chosen.edit(output if edited is None else edited)
    return edited


def recomputed_choice(qualname: str) -> ValueError:
    """The failure where a checkpoint recomputes a call of ``qualname`` whose edit ``when``
    chooses: which call it is, is not known in the backward."""
    return ValueError(
        f"a checkpoint recomputed a call of {qualname!r} in the backward, whose edit is chosen "
        "by when: which call it was is not known there, so the gradients may be of outputs "
        "the forward did not have. Give that edit no when, or keep the module out of "
        "checkpointed code")
