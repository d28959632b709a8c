"""What a probe is: a site, the modules it watches, what it keeps, and how and when."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from torchgraphrec.probes.reduce import REDUCTIONS, Reduction
from torchgraphrec.probes.select import Selector
from torchgraphrec.probes.stats import Keeper, Stat, keepers

__all__ = ["SITES", "Context", "Probe", "probe"]

#: Where a probe looks. Gradients come from tensor hooks, never module backward hooks.
SITES = {
    "input": "the tensors a call receives (positional at the call, keyword ones after it)",
    "output": "the tensors a call returns",
    "grad_output": "dL/d(output) of each tensor a call returns",
    "grad_input": "dL/d(input) of each tensor a call receives (all of the tensor's uses)",
    "param": "the module's own parameters at each call",
    "param_grad": "each own parameter's gradient, once it is accumulated",
    "param_update": "each own parameter's change since the previous step() (an optimizer step)",
}


@dataclass(frozen=True)
class Context:
    """What a probe's ``when`` predicate is asked about."""

    step: int
    epoch: int
    module: str
    call_index: int
    training: bool


@dataclass(frozen=True)
class Probe:
    """One probe; make it with :func:`probe`."""

    site: str
    where: Optional[Selector]
    keepers: tuple[Keeper, ...]
    reduce: Reduction
    when: Optional[Callable[[Context], bool]]
    edit: Optional[Callable[[Any], Any]]

    def wants(self, context: Context) -> bool:
        return self.when is None or bool(self.when(context))


def probe(site: str, *, where: Optional[Selector] = None,
          keep: Union[str, Stat, Sequence[Union[str, Stat]]] = "rms",
          reduce: Reduction = "all", when: Optional[Callable[[Context], bool]] = None,
          edit: Optional[Callable[[Any], Any]] = None) -> Probe:
    """A probe for a :class:`~torchgraphrec.Recorder`.

    Args:
        site: one of :data:`SITES`.
        where: a :mod:`~torchgraphrec.select` selector (``None``: every module).
        keep: a statistic's name (``"full"`` keeps a detached CPU copy), a callable, or a
            list of them (see :mod:`~torchgraphrec.probes.stats`).
        reduce: ``"all"`` (one entry per call, ``None`` for a call nothing was kept of,
            and a row per scalar in ``frame()``), ``"last"``, ``"sum"``, ``"running"``
            (mean, var, min and max; ``count`` values folded, ``undefined`` and
            ``other_shape`` left out), or a function of two arguments folding the entries;
            reduced probes keep constant memory and are read with ``rec[qualname, site]``.
            A value the statistic leaves undefined (the first ``cosine``) is left out of a
            reduction, a NaN of the data is not; ``"sum"`` and ``"running"`` fold tensors
            elementwise and leave out, with a warning, a value of another shape.
        when: a predicate over a :class:`Context`; the probe records only where it is true.
        edit: only for ``output``: a function returning a replacement for the output
            (scio's ``activation_postproc``), applied after the output is recorded, and
            again where ``torch.utils.checkpoint`` recomputes the call in a backward run
            inside the ``Recorder`` block (after the block, no hook is left to apply it).
            Not with ``every`` > 1, nor chosen by ``when`` inside checkpointed code.

    >>> probe("output", keep=["rms", "dead"]).site
    'output'
    >>> probe("weights")
    Traceback (most recent call last):
    ValueError: unknown site: 'weights' (must be one of ['grad_input', 'grad_output', 'input', 'output', 'param', 'param_grad', 'param_update'])
    """
    if not isinstance(site, str):
        raise TypeError(f"site must be a str, one of {sorted(SITES)}, got {site!r}")
    if site not in SITES:
        raise ValueError(f"unknown site: {site!r} (must be one of {sorted(SITES)})")
    if where is not None and not isinstance(where, Selector):
        raise TypeError(f"where must be a torchgraphrec.select selector or None, got {where!r}")
    if not (reduce in REDUCTIONS or callable(reduce)):
        raise ValueError(f"unknown reduce: {reduce!r} (must be a function of two arguments or "
                         f"one of {list(REDUCTIONS)})")
    if when is not None and not callable(when):
        raise TypeError(f"when must be a callable taking a Context, got {when!r}")
    if edit is not None and (site != "output" or not callable(edit)):
        raise ValueError("edit takes a callable, and only on the 'output' site")
    return Probe(site, where, tuple(keepers(keep)), reduce, when, edit)
