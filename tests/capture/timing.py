"""Independent observations of how long a forward and its module calls take, to test the recorder's times against."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Callable

from torch import nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

__all__ = ["median_shares", "plain_forward_ms", "profiler_shares", "recorded_shares"]

Label = tuple[str, int]  # (qualname, call index)
_PREFIX = "call:"


def plain_forward_ms(run: Callable[[], Any], repeats: int) -> float:
    """The median of ``repeats`` plain runs of ``run``, in ms, each after a collection."""
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter_ns()
        run()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e6


def _label_calls(model: nn.Module, counts: dict[str, int]) -> list[Any]:
    """Hooks that open a profiler range per module call, named by qualname and call index
    (counted in ``counts``)."""
    ranges: list[Any] = []
    handles = []
    for qualname, module in model.named_modules():
        def pre(module: nn.Module, args: tuple, qualname: str = qualname) -> None:
            index = counts.get(qualname, 0)
            counts[qualname] = index + 1
            ranges.append(record_function(f"{_PREFIX}{qualname}#{index}"))
            ranges[-1].__enter__()

        def post(module: nn.Module, args: tuple, output: Any) -> None:
            ranges.pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return handles


def _owner(event: Any) -> Label | None:
    """The innermost module call around a top-level ATen op, or ``None`` for an op inside
    another op (its time is its parent's)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(_PREFIX):
            return _label(parent)
        if parent.name.startswith("aten::"):
            return None
        parent = parent.cpu_parent
    return None


def profiler_shares(model: nn.Module, run: Callable[[], Any], repeats: int) -> dict[Label, float]:
    """Each module call's share of the forward's op time as ``torch.profiler`` measures it
    in plain runs (no recorder), the median of ``repeats``: the CPU time of every top-level
    ATen op, given to the module call that ran it and to the calls around that one."""
    counts: dict[str, int] = {}
    handles = _label_calls(model, counts)
    found: list[dict[Label, float]] = []
    try:
        run()  # warm-up, with the hooks in place
        for _ in range(repeats):
            counts.clear()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
                run()
            found.append(_shares(prof.events()))
    finally:
        for handle in handles:
            handle.remove()
    return median_shares(found)


def median_shares(found: list[dict[Label, float]]) -> dict[Label, float]:
    """Each call's median share over runs (0 in a run where it has none)."""
    return {call: statistics.median(shares.get(call, 0.0) for shares in found)
            for call in found[0]}


def _label(event: Any) -> Label:
    qualname, index = event.name[len(_PREFIX):].rsplit("#", 1)
    return qualname, int(index)


def _enclosing(event: Any) -> Label | None:
    """The module call whose range encloses ``event`` most closely."""
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith(_PREFIX):
        parent = parent.cpu_parent
    return None if parent is None else _label(parent)


def _shares(events: Any) -> dict[Label, float]:
    parents = {_label(event): _enclosing(event) for event in events
               if event.name.startswith(_PREFIX)}
    totals: dict[Label, float] = {}
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        call = _owner(event)
        while call is not None:
            totals[call] = totals.get(call, 0.0) + event.cpu_time_total
            call = parents.get(call)
    whole = totals[("", 0)]
    return {call: total / whole for call, total in totals.items()}


def recorded_shares(graph: Any) -> dict[Label, float]:
    """Each layer node's ``forward_ms`` as a share of the root call's."""
    layers = [attrs for _, attrs in graph.nodes(data=True) if attrs["kind"] == "layer"]
    root = next(attrs for attrs in layers if attrs["parent"] is None)
    return {(attrs["qualname"], attrs["call_index"]): attrs["forward_ms"] / root["forward_ms"]
            for attrs in layers}
