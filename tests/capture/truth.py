"""An independent observer of data flow between module calls, to test the recorder against.

It works at a different level from the recorder: a ``TorchDispatchMode`` sees the ATen ops
below autograd, and each tensor's provenance is kept by the memory it views (storage,
offset, shape, stride, dtype), never by Python identity or version counters. Leaf-call
hooks mark what each call returned and collect what each call received.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["DataFlowTracer", "leaf_calls"]

Label = tuple[str, int]  # (qualname, call index)


def _key(tensor: torch.Tensor) -> tuple:
    return (tensor.untyped_storage()._cdata, tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), tensor.dtype)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


class DataFlowTracer(TorchDispatchMode):
    """``received[B]``: the leaf calls whose outputs anything ``B`` received was computed
    from (through any ops, differentiable or not, in place or not)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.taint: dict[tuple, frozenset[Label]] = {}
        self.received: dict[Label, frozenset[Label]] = {}
        self._keep: list[torch.Tensor] = []  # no storage freed, so no address reused
        self._counts: dict[str, int] = {}
        self._open: list[Label] = []
        self._handles = []
        for qualname, module in model.named_modules():
            if not any(True for _ in module.children()):
                self._handles.append(module.register_forward_pre_hook(
                    self._pre(qualname), with_kwargs=True))
                self._handles.append(module.register_forward_hook(self._post))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def _sources(self, tensors: list[torch.Tensor]) -> frozenset[Label]:
        found: frozenset[Label] = frozenset()
        for tensor in tensors:
            if tensor.is_nested:
                continue
            found |= self.taint.get(_key(tensor), frozenset())
        return found

    def _pre(self, qualname: str) -> Any:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            index = self._counts.get(qualname, 0)
            self._counts[qualname] = index + 1
            label = (qualname, index)
            self._open.append(label)
            self.received[label] = self._sources(_tensors((args, kwargs)))
        return hook

    def _post(self, module: nn.Module, args: tuple, output: Any) -> None:
        label = self._open.pop()
        for tensor in _tensors(output):
            if not tensor.is_nested:
                key = _key(tensor)
                self.taint[key] = self.taint.get(key, frozenset()) | {label}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        inputs = [t for t in _tensors((args, kwargs or {})) if not t.is_nested]
        versions = [t._version if not t.is_inference() else None for t in inputs]
        # what the op read, before it ran: an op that restrides its input in place
        # (as_strided_, in AdaptiveAvgPool1d) changes the memory key the taint is under
        sources = self._sources(inputs)
        out = func(*args, **(kwargs or {}))
        written = [t for t, v in zip(inputs, versions) if v is not None and t._version != v]
        mutable = getattr(getattr(func, "_schema", None), "is_mutable", False)
        if mutable and not written:  # inference tensors keep no version counter
            written = inputs[:1]
        for tensor in written:  # an in-place write changes every view of its memory
            storage = tensor.untyped_storage()._cdata
            for key in [k for k in self.taint if k[0] == storage] + [_key(tensor)]:
                self.taint[key] = self.taint.get(key, frozenset()) | sources
        for tensor in _tensors(out):
            self._keep.append(tensor)
            if not tensor.is_nested:
                key = _key(tensor)
                self.taint[key] = self.taint.get(key, frozenset()) | sources
        self._keep += inputs
        return out


def leaf_calls(graph: Any, model: nn.Module) -> dict[Label, dict]:
    """The recorded calls of modules without children, by (qualname, call index)."""
    leaves = {qualname for qualname, module in model.named_modules()
              if not any(True for _ in module.children())}
    return {(attrs["qualname"], attrs["call_index"]): attrs
            for _, attrs in graph.nodes(data=True)
            if attrs["kind"] == "layer" and attrs["qualname"] in leaves}
