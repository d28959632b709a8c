"""The recorders measured side by side, each as a function that returns a capture thunk."""

from __future__ import annotations

from typing import Any, Callable

import time
import weakref

import torch
import torch.utils._python_dispatch

from floorgraph import floor_graph, global_hooks
from floorschema import floor_schema

__all__ = ["TOOLS", "BENCH_MODELS", "GRAD_ONLY"]

Thunk = Callable[[], Any]


def _first_output(model: torch.nn.Module, args: tuple, kwargs: dict) -> torch.Tensor:
    from torchgraphrec.recording import backward_loss

    return backward_loss(model(*args, **kwargs))


def torchgraphrec_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    import torchgraphrec

    return lambda: torchgraphrec.record(model, args, kwargs).graph


def torchgraphrec_autograd_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    import torchgraphrec

    return lambda: torchgraphrec.record(model, args, kwargs, ops="autograd").graph


def torchgraphrec_flops_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    import torchgraphrec

    return lambda: torchgraphrec.record(model, args, kwargs, flops=True).graph


def torchgraphrec_memory_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    import torchgraphrec

    return lambda: torchgraphrec.record(model, args, kwargs, memory=True).graph


def flop_counter_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """PyTorch's own FLOP counter around the forward, with its per-module table."""
    from torch.utils.flop_counter import FlopCounterMode

    def run() -> Any:
        with FlopCounterMode(display=False) as counter:
            model(*args, **kwargs)
        return counter.get_flop_counts()
    return run


def torchviz_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    from torchviz import make_dot

    params = dict(model.named_parameters())
    return lambda: make_dot(_first_output(model, args, kwargs), params=params)


def torchview_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    from torchview import draw_graph

    return lambda: draw_graph(model, input_data=list(args), depth=3, **kwargs)


def torchlens_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    import torchlens

    return lambda: torchlens.trace(model, list(args), input_kwargs=kwargs or None, save=None)


def torchrecorder_capture(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    import torchrecorder

    if kwargs:
        raise TypeError("torchrecorder.record takes no keyword arguments")
    return lambda: torchrecorder.record(model, "net", None, input_data=args)


def _noop(*_: Any) -> None:
    return None


def floor_global_hooks(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """No-op global pre/post hooks around every forward: what torchgraphrec's hooks cost
    before they do anything."""
    def run() -> Any:
        handles = global_hooks(_noop, _noop)
        try:
            return model(*args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
    return run


class _NoopMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        return func(*args, **(kwargs or {}))


def floor_hooks_and_mode(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """The no-op global hooks and a no-op torch-function mode: what recording every
    module call and every torch-level call costs before it records anything."""
    hooks = floor_global_hooks(model, args, kwargs)

    def run() -> Any:
        with _NoopMode():
            return hooks()
    return run


class _NotingMode(torch.overrides.TorchFunctionMode):
    """Notes each op's function, its tensor arguments' ids and versions, and its result's
    id, shape and dtype; keeps the result by weak reference (as any recorder must, to tell
    a reused id apart)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []
        self.results: dict = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        inputs = [(id(a), a._version) for a in args if isinstance(a, torch.Tensor)]
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.results[id(out)] = (weakref.ref(out), len(self.ops))
            self.ops.append((func, inputs, out.shape, out.dtype, time.perf_counter_ns()))
        return out


def floor_noting(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """Global hooks and a torch-function mode that only append what each call and op took
    and made to lists: the least a Python recorder of every op can do, before naming or
    building anything."""
    def run() -> Any:
        handles = _noting_hooks([])
        try:
            with _NotingMode():
                return model(*args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
    return run


def _noting_hooks(calls: list) -> list:
    """Global hooks appending each module call's module, input ids, output id and start."""
    stack: list = []

    def pre(module: torch.nn.Module, inputs: tuple) -> None:
        stack.append(len(calls))
        calls.append([id(module), [id(x) for x in inputs if isinstance(x, torch.Tensor)],
                      None, time.perf_counter_ns()])

    def post(module: torch.nn.Module, inputs: tuple, given: dict, output: Any) -> None:
        calls[stack.pop()][2] = id(output)

    return global_hooks(pre, post)


def floor_calls_and_torchviz(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """torchviz's job (the autograd graph) plus noting every module call: the least the
    job of ``ops="autograd"`` costs when done by torchviz and the hooks of ``floor:noting``
    (grad mode)."""
    from torchviz import make_dot

    params = dict(model.named_parameters())

    def run() -> Any:
        handles = _noting_hooks([])
        try:
            output = _first_output(model, args, kwargs)
        finally:
            for handle in handles:
                handle.remove()
        return make_dot(output, params=params)
    return run


class _NoopDispatchMode(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        return func(*args, **(kwargs or {}))


def floor_dispatch_mode(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """A no-op dispatch mode around the forward: what seeing every ATen op costs (how
    FLOPs are counted) before counting anything."""
    def run() -> Any:
        with _NoopDispatchMode():
            return model(*args, **kwargs)
    return run


def _pack(tensor: torch.Tensor) -> torch.Tensor:
    # an op's result held as it is would hold its own autograd node: a reference cycle,
    # whose memory the collector frees after the timed call, flattering the floor
    return tensor if tensor.is_leaf else tensor.detach()


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _saving(thunk: Thunk) -> Thunk:
    """``thunk`` run under saved-tensor hooks that only hand each tensor back (without a
    reference cycle)."""
    def run() -> Any:
        with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
            return thunk()
    return run


def floor_noting_and_saving(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """``floor:noting`` with saved-tensor hooks that only hand each tensor back: the least
    a recorder that also counts what autograd saves (in grad mode) pays before naming or
    building anything."""
    return _saving(floor_noting(model, args, kwargs))


def floor_schema_and_saving(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """``floor:schema`` with the saved-tensor hooks of ``floor:noting+saved``."""
    return _saving(floor_schema(model, args, kwargs))


def floor_graph_and_saving(model: torch.nn.Module, args: tuple, kwargs: dict) -> Thunk:
    """``floor:graph`` with the saved-tensor hooks of ``floor:noting+saved`` (grad mode: the
    least a true graph costs where what autograd saves is counted, as with
    ``memory=True``)."""
    return _saving(floor_graph(model, args, kwargs))


TOOLS: dict[str, Callable[..., Thunk]] = {
    "torchgraphrec": torchgraphrec_capture,
    "torchgraphrec+flops": torchgraphrec_flops_capture,
    "torchgraphrec+memory": torchgraphrec_memory_capture,
    "torchgraphrec+autograd": torchgraphrec_autograd_capture,
    "flop_counter": flop_counter_capture,
    "floor:hooks": floor_global_hooks,
    "floor:hooks+mode": floor_hooks_and_mode,
    "floor:noting": floor_noting,
    "floor:noting+saved": floor_noting_and_saving,
    "floor:dispatch": floor_dispatch_mode,
    "floor:graph": floor_graph,
    "floor:graph+saved": floor_graph_and_saving,
    "floor:schema": floor_schema,
    "floor:schema+saved": floor_schema_and_saving,
    "floor:calls+torchviz": floor_calls_and_torchviz,
    "torchviz": torchviz_capture,
    "torchview": torchview_capture,
    "torchlens": torchlens_capture,
    "torchrecorder": torchrecorder_capture,
}
#: Measured with autograd on only: torchviz draws the autograd graph, the FLOP targets
#: are for a training forward, and only a forward in grad mode saves tensors.
GRAD_ONLY = frozenset({"torchviz", "floor:calls+torchviz", "torchgraphrec+flops",
                       "torchgraphrec+memory",
                       "torchgraphrec+autograd", "flop_counter", "floor:dispatch",
                       "floor:noting+saved", "floor:graph+saved", "floor:schema+saved"})


def _gpt2_small() -> Any:
    from transformers import GPT2Config, GPT2Model

    from models import Case

    model = GPT2Model(GPT2Config(bos_token_id=0, eos_token_id=0)).eval()
    return Case(model, (torch.randint(0, 50257, (1, 16)),), {})


def _zoo(name: str) -> Callable[[], Any]:
    def make() -> Any:
        import models

        return models.ZOO[name]()
    return make


def _deep(layers: int, width: int) -> Callable[[], Any]:
    def make() -> Any:
        import models

        return models.deep_mlp(layers, width)
    return make


def _resnet50() -> Any:
    import models

    return models.resnet50_like()


BENCH_MODELS: dict[str, Callable[[], Any]] = {
    "mlp_small": _zoo("mlp"),
    "mlp_deep_200": _deep(200, 64),
    "mlp_deep_1000": _deep(1000, 32),
    "resnet_like": _zoo("resnet_like"),
    "resnet50_like": _resnet50,
    "transformer_tiny": _zoo("transformer_encoder"),
    "gpt2_small": _gpt2_small,
    "lstm_gru": _zoo("recurrent"),
    "weight_sharing": _zoo("reused_module"),
    "multi_io_kwargs": _zoo("two_inputs_kwargs"),
}
