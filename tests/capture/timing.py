"""Independent observations of how long a forward and its module calls take, to test the recorder's times against."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

__all__ = ["least_shares", "plain_forward_ms", "profiler_times", "recorded_times"]

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


def profiler_times(model: nn.Module, run: Callable[[], Any],
                   repeats: int) -> list[dict[Label, float]]:
    """Each module call's op time as ``torch.profiler`` measures it in ``repeats`` plain runs
    (no recorder): the time of every top-level ATen op, given to the module call that ran it
    and to the calls around that one.

    Each run starts with a different number of tiny ops outside any module call (counted
    for none): where something the profiler does at a fixed count of events (growing its
    buffers, say) lands on the same op in every run, it lands on a different one in each,
    and the least of the runs leaves it out. Once, on torch 2.4 in a full suite, GPT-2's
    last GELU read 0.06 of the forward, where it takes 0.004, in every one of 7 runs."""
    counts: dict[str, int] = {}
    handles = _label_calls(model, counts)
    found: list[dict[Label, float]] = []
    try:
        run()  # warm-up, with the hooks in place
        for repeat in range(repeats):
            counts.clear()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
                _tiny_ops(97 * repeat)
                run()
            found.append(_totals(prof.events()))
    finally:
        for handle in handles:
            handle.remove()
    return found


def _tiny_ops(count: int) -> None:
    """``count`` ATen calls that take next to no time."""
    value = torch.zeros(1)
    for _ in range(count):
        value.add_(1)


def least_shares(found: list[dict[Label, float]]) -> dict[Label, float]:
    """Each call's least time over runs as a share of the root call's least time.

    Noise only ever adds time (a descheduled thread, a page fault, a collection), and it
    can land on one small call in most runs of a loaded machine: the least of each call is
    the estimate it cannot inflate, where a median of shares is not (it once read 0.06 for
    a GELU whose share is 0.01)."""
    least = {call: min(times.get(call, 0.0) for times in found) for call in found[0]}
    return {call: time / least[("", 0)] for call, time in least.items()}


def _label(event: Any) -> Label:
    qualname, index = event.name[len(_PREFIX):].rsplit("#", 1)
    return qualname, int(index)


def _enclosing(event: Any) -> Label | None:
    """The module call whose range encloses ``event`` most closely."""
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith(_PREFIX):
        parent = parent.cpu_parent
    return None if parent is None else _label(parent)


def _totals(events: Any) -> dict[Label, float]:
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
    return totals


def recorded_times(graph: Any) -> dict[Label, float]:
    """Each layer node's ``forward_ms``, by call."""
    return {(attrs["qualname"], attrs["call_index"]): attrs["forward_ms"]
            for _, attrs in graph.nodes(data=True) if attrs["kind"] == "layer"}
