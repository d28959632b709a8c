"""Lookup tables built once per recorder: the model's modules and parameters by identity."""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["ModuleTable"]


class ModuleTable:
    """Names of a model's modules and parameters, keyed by ``id()`` while the model lives.

    Modules are numbered in the order of ``named_modules()``, and the first name wins where
    a module or parameter is reachable under several names (tied weights, shared blocks), as
    in ``named_modules()`` and ``named_parameters()``.

    >>> table = ModuleTable(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    >>> table.qualnames, table.labels, table.all_num_params()
    (['', '0', '1'], ['Sequential', '0: Linear', '1: ReLU'], [6, 6, 0])
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.index_of: dict[int, int] = {}
        self.modules: list[nn.Module] = []
        self.qualnames: list[str] = []
        self.types: list[str] = []
        self.labels: list[str] = []  # the layer nodes' labels
        self.param_names: dict[int, str] = {}
        self.param_owner: dict[str, int] = {}
        self._params: list[tuple[int, Any]] = []  # (owner index, parameter)
        self._parents: list[int] = []  # each module's index of the module it was found in
        self._num_params: list[int] | None = None
        self._by_qualname: dict[str, int] | None = None
        self._traverse(model)

    def _traverse(self, model: nn.Module) -> None:
        # An explicit pre-order stack: named_modules()'s nested generators cost a hop per
        # level for every module, and this table is made on every record().
        index_of, param_names = self.index_of, self.param_names
        stack: list[tuple[str, nn.Module, int]] = [("", model, -1)]
        while stack:
            qualname, module, parent = stack.pop()
            if id(module) in index_of:
                continue
            index = index_of[id(module)] = len(self.modules)
            self.modules.append(module)
            self._parents.append(parent)
            self.qualnames.append(qualname)
            type_name = type(module).__name__
            self.types.append(type_name)
            self.labels.append(f"{qualname}: {type_name}" if qualname else type_name)
            prefix = qualname + "." if qualname else ""
            for name, param in module._parameters.items():
                if param is not None and id(param) not in param_names:
                    param_names[id(param)] = full_name = prefix + name
                    self.param_owner[full_name] = index
                    self._params.append((index, param))
            children = [(prefix + name, child, index) for name, child in module._modules.items()
                        if child is not None]
            stack += reversed(children)

    def module_by_qualname(self, qualname: str) -> int | None:
        """The index of the module named ``qualname``, if there is one."""
        if self._by_qualname is None:
            self._by_qualname = {name: index for index, name in enumerate(self.qualnames)}
        return self._by_qualname.get(qualname)

    def all_num_params(self) -> list[int]:
        """How many parameter elements each module holds, nested ones included, by index
        (computed once)."""
        if self._num_params is None:
            totals = [0] * len(self.modules)
            for owner, param in self._params:
                totals[owner] += param.numel()
            # pre-order puts every module after the one it was found in: sum bottom-up
            for index in range(len(totals) - 1, 0, -1):
                totals[self._parents[index]] += totals[index]
            self._num_params = totals
        return self._num_params
