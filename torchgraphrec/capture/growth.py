"""Modules, parameters and buffers a model registers while it is recorded (Keras-style building in a forward)."""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from torchgraphrec.capture.tables import ModuleTable

__all__ = ["Growth"]


class Growth:
    """PyTorch's global registration hooks, which add to ``table`` what the recording
    thread registers on the model's own modules: a module a forward builds and appends
    (its calls become layer nodes), a parameter or buffer it creates (a param node).
    ``on_tensor`` is given each parameter and buffer added, ``on_modules`` the modules. The hooks return ``None``:
    what is registered is never changed. Attached by :meth:`attach`, removed by
    :meth:`detach`.
    """

    def __init__(self, table: ModuleTable, on_tensor: Callable[[torch.Tensor], None],
                 on_modules: Callable[[list[nn.Module]], None]) -> None:
        self.table = table
        self.on_tensor = on_tensor
        self.on_modules = on_modules
        self._thread = -1
        self._handles: list[Any] = []

    def attach(self) -> None:
        """Start listening (on the calling thread)."""
        self._thread = threading.get_ident()
        self._handles = [
            torch_module.register_module_module_registration_hook(self._module),
            torch_module.register_module_parameter_registration_hook(self._parameter),
            torch_module.register_module_buffer_registration_hook(self._buffer),
        ]

    def detach(self) -> None:
        """Stop listening; safe to call twice."""
        while self._handles:
            self._handles.pop().remove()

    def _module(self, parent: nn.Module, name: str, module: Any) -> None:
        if module is not None and self._ours(parent):
            known = len(self.table.modules)
            for tensor in self.table.add_module(parent, name, module):
                self.on_tensor(tensor)
            self.on_modules(self.table.modules[known:])

    def _parameter(self, module: nn.Module, name: str, param: Any) -> None:
        self._tensor(module, name, param, False)

    def _buffer(self, module: nn.Module, name: str, buffer: Any) -> None:
        self._tensor(module, name, buffer, True)

    def _tensor(self, module: nn.Module, name: str, tensor: Any, buffer: bool) -> None:
        if self._ours(module) and self.table.add_tensor(module, name, tensor, buffer):
            self.on_tensor(tensor)

    def _ours(self, module: nn.Module) -> bool:
        """A registration on one of the model's modules, by the recording thread."""
        return id(module) in self.table.index_of and threading.get_ident() == self._thread
