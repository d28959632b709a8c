"""Lookup tables built once per recorder: the model's modules and parameters by identity."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["ModuleTable"]


@dataclass
class ModuleTable:
    """Names of a model's modules and parameters, keyed by ``id()`` while the model lives.

    The first name wins where a module or parameter is reachable under several names (tied
    weights, shared blocks), as in ``named_modules()`` and ``named_parameters()``.
    """

    model: nn.Module
    index_of: dict[int, int] = field(default_factory=dict)
    modules: list[nn.Module] = field(default_factory=list)
    qualnames: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    param_names: dict[int, str] = field(default_factory=dict)
    _by_qualname: dict[str, int] = field(default_factory=dict)
    _num_params: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for qualname, module in self.model.named_modules():
            self.index_of[id(module)] = len(self.modules)
            self.modules.append(module)
            self.qualnames.append(qualname)
            self.types.append(type(module).__name__)
            self._by_qualname[qualname] = self.index_of[id(module)]
        for qualname, param in self.model.named_parameters():
            self.param_names[id(param)] = qualname

    def param_name(self, tensor: torch.Tensor) -> str | None:
        """The qualname of ``tensor`` if it is one of the model's parameters."""
        return self.param_names.get(id(tensor))

    def module_by_qualname(self, qualname: str) -> int | None:
        """The index of the module named ``qualname``, if there is one."""
        return self._by_qualname.get(qualname)

    def num_params(self, index: int) -> int:
        """How many parameter elements module ``index`` holds, nested ones included."""
        if index not in self._num_params:
            module = self.modules[index]
            self._num_params[index] = sum(p.numel() for p in module.parameters())
        return self._num_params[index]
