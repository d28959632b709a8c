"""Lookup tables built once per recorder: the model's modules and parameters by identity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    param_owner: dict[str, int] = field(default_factory=dict)
    _by_qualname: dict[str, int] = field(default_factory=dict)
    _sizes: list[tuple[str, Any]] = field(default_factory=list)
    _num_params: list[int] | None = None

    def __post_init__(self) -> None:
        # One traversal; parameters take their first name, as in named_parameters().
        for qualname, module in self.model.named_modules():
            self.index_of[id(module)] = self._by_qualname[qualname] = len(self.modules)
            self.modules.append(module)
            self.qualnames.append(qualname)
            self.types.append(type(module).__name__)
            prefix = qualname + "." if qualname else ""
            for name, param in module._parameters.items():
                if param is not None and id(param) not in self.param_names:
                    self.param_names[id(param)] = prefix + name
                    self.param_owner[prefix + name] = len(self.modules) - 1
                    self._sizes.append((prefix + name, param))

    def module_by_qualname(self, qualname: str) -> int | None:
        """The index of the module named ``qualname``, if there is one."""
        return self._by_qualname.get(qualname)

    def all_num_params(self) -> list[int]:
        """How many parameter elements each module holds, nested ones included, by index
        (computed once)."""
        if self._num_params is None:
            totals = dict.fromkeys(self.qualnames, 0)
            for qualname, param in self._sizes:
                size = param.numel()
                module_name = qualname.rpartition(".")[0]
                while True:  # every enclosing module, up to the root ("")
                    if module_name in totals:
                        totals[module_name] += size
                    if not module_name:
                        break
                    module_name = module_name.rpartition(".")[0]
            self._num_params = [totals[qualname] for qualname in self.qualnames]
        return self._num_params
