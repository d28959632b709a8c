"""What PyTorch's hook and mode machinery costs per event, before and after the recorder's own code."""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.modules import module as torch_module
from torch.overrides import TorchFunctionMode

from torchgraphrec._torch import GLOBAL_FORWARD_HOOKS_TAKE_KWARGS, SAVED_TENSOR_HOOKS_READABLE, \
    TorchDispatchMode, dispatch_mode_depth, function_mode_depth, global_module_hooks, \
    graph_task_id, register_global_forward_hook, saved_tensor_hooks_enabled, \
    top_saved_tensor_hooks
from torchgraphrec.capture.ownhooks import OwnHook

__all__ = ["DispatchCosts", "NO_COSTS", "dispatch_costs", "dispatch_mode_cost"]

_now: Callable[[], int] = time.perf_counter_ns
_ROUNDS, _CALLS = 5, 100


class DispatchCosts(NamedTuple):
    """Nanoseconds PyTorch spends per event getting to the recorder's code and back, which
    that code cannot time itself (it starts after, and ends before): the recording's clock
    is stopped for them as for the recorder's own work.

    ``call``: a module call through global forward hooks; ``op``: a call reaching a
    torch-function mode from C++; ``python_op``: one reaching it through
    ``torch.overrides.handle_torch_function`` (``torch.nn.functional``'s Python functions);
    ``pack``: a saved-tensor pack hook.
    """

    call: int
    op: int
    python_op: int
    pack: int


#: Where nothing could be measured: nothing is taken off.
NO_COSTS = DispatchCosts(0, 0, 0, 0)


def dispatch_costs() -> DispatchCosts:
    """The costs, measured once per process (in a few tens of milliseconds); until they
    are, :data:`NO_COSTS` where measuring would run through a user's own modes or hooks
    (a torch-function or dispatch mode, global module hooks or saved-tensor hooks are
    active, in a backward, in inference mode) or cannot run (saved-tensor hooks disabled).

    >>> costs = dispatch_costs()
    >>> all(value >= 0 for value in costs)
    True
    """
    return _measured() if _may_measure(_measured) else NO_COSTS


def dispatch_mode_cost() -> int:
    """The same for an ATen op through a ``TorchDispatchMode`` (measured apart: the first
    dispatch mode of a process costs most of a second to set up).

    >>> dispatch_mode_cost() >= 0
    True
    """
    return _measured_dispatch() if _may_measure(_measured_dispatch) else 0


def _may_measure(measured: Any) -> bool:
    """Whether ``measured`` (one of the cached measurements) may be asked: it has measured
    already, whatever hooks are there now, or it can measure here."""
    return bool(measured.cache_info().currsize) or _measurable()


def _measurable() -> bool:
    # a pack hook cannot be pushed where saved-tensor hooks are disabled; and the user's
    # own hooks would see the thousand calls and packs that measuring makes
    return not (function_mode_depth() or dispatch_mode_depth()
                or torch.is_inference_mode_enabled() or graph_task_id() >= 0
                or not saved_tensor_hooks_enabled() or global_module_hooks()
                or (SAVED_TENSOR_HOOKS_READABLE and top_saved_tensor_hooks() is not None))


@functools.lru_cache(maxsize=1)
def _measured() -> DispatchCosts:
    x = torch.ones(2)
    leaf = torch.ones(2, requires_grad=True)
    with torch.enable_grad():
        return DispatchCosts(call=_unmeasured(_module_call, torch.nn.Identity(), x),
                             op=_unmeasured(_mode_call, torch.neg, x),
                             python_op=_unmeasured(_mode_call, F.relu, x),
                             pack=_unmeasured(_packing, torch.relu, leaf))


@functools.lru_cache(maxsize=1)
def _measured_dispatch() -> int:
    return _unmeasured(_dispatch_call, torch.neg, torch.ones(2))


def _unmeasured(way: Callable[[Callable, Any, list], Any], call: Callable, value: Any) -> int:
    """What ``way`` adds to each ``call(value)`` beyond the time its handlers measured
    themselves (into their list): the least of the instrumented rounds (less what the
    handlers measured) less the least of the plain ones, since other work on the machine
    only ever adds to either (a difference per round is low wherever that round's plain
    calls were slowed, down to nothing); never below zero, which would run the clock
    backwards."""
    plain, rest = [], []
    for _ in range(_ROUNDS):
        start = _now()
        for _ in range(_CALLS):
            call(value)
        plain.append(_now() - start)
        inner = [0]
        start = _now()
        way(call, value, inner)
        rest.append(_now() - start - inner[0])
    return max(0, (min(rest) - min(plain)) // _CALLS)


def _module_call(module: Any, value: Any, inner: list) -> None:
    def pre(module: Any, args: tuple) -> None:
        entered = _now()
        inner[0] += _now() - entered

    def post(module: Any, args: tuple, *rest: Any) -> None:
        entered = _now()
        inner[0] += _now() - entered

    # as the recorder hooks: globally where global hooks take kwargs, else on the module
    handles = [torch_module.register_module_forward_pre_hook(pre),
               register_global_forward_hook(post, with_kwargs=True, always_call=True)
               if GLOBAL_FORWARD_HOOKS_TAKE_KWARGS else
               module.register_forward_hook(OwnHook(post), with_kwargs=True, always_call=True)]
    try:
        for _ in range(_CALLS):
            module(value)
    finally:
        for handle in handles:
            handle.remove()


class _Timed(TorchFunctionMode):
    def __init__(self, inner: list) -> None:
        super().__init__()
        self.inner = inner

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Any = None) -> Any:
        entered = _now()
        kwargs = kwargs or {}
        called = _now()
        out = func(*args, **kwargs)
        returned = _now()
        self.inner[0] += called - entered + _now() - returned
        return out


def _mode_call(call: Callable, value: Any, inner: list) -> None:
    with _Timed(inner):
        for _ in range(_CALLS):
            call(value)


def _packing(call: Callable, value: Any, inner: list) -> None:
    def pack(tensor: torch.Tensor) -> Any:
        entered = _now()
        packed = tensor.detach()  # as the recorder keeps it: a result held would make a cycle
        inner[0] += _now() - entered
        return packed

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda packed: packed):
        for _ in range(_CALLS):
            call(value)


# the same body as _Timed's, inline in each on purpose: a shared helper's call would fall
# outside the timed span and be measured as PyTorch's own cost
class _TimedDispatch(TorchDispatchMode):
    def __init__(self, inner: list) -> None:
        super().__init__()
        self.inner = inner

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Any = None) -> Any:
        entered = _now()
        kwargs = kwargs or {}
        called = _now()
        out = func(*args, **kwargs)
        returned = _now()
        self.inner[0] += called - entered + _now() - returned
        return out


def _dispatch_call(call: Callable, value: Any, inner: list) -> None:
    with _TimedDispatch(inner):
        for _ in range(_CALLS):
            call(value)
