"""Lookup tables built once per recorder: the model's modules, parameters and buffers by identity."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.nn.parameter import is_lazy

__all__ = ["ModuleTable"]


class ModuleTable:
    """Names of a model's modules, parameters and buffers, keyed by ``id()`` while the model lives.

    Modules are numbered in the order of ``named_modules()``, and the first name wins where
    a module or tensor is reachable under several names (tied weights, shared blocks), as
    in ``named_modules()`` and ``named_parameters()``. ``tensor_ids`` maps a parameter or
    buffer to its param node id, ``tensor_owner`` that id to the index of its module.

    >>> table = ModuleTable(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    >>> table.qualnames, table.labels, table.all_num_params()
    (['', '0', '1'], ['Sequential', '0: Linear', '1: BatchNorm1d'], [10, 6, 4])
    >>> sorted(table.buffers)
    ['param:1.num_batches_tracked', 'param:1.running_mean', 'param:1.running_var']
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.index_of: dict[int, int] = {}
        self.modules: list[nn.Module] = []
        self.qualnames: list[str] = []
        self.types: list[str] = []
        self.labels: list[str] = []  # the layer nodes' labels
        self.tensor_ids: dict[int, str] = {}  # id(parameter or buffer) -> its node id
        self.tensor_owner: dict[str, int] = {}  # node id -> the index of its module
        self.buffers: set[str] = set()  # the node ids that name buffers
        self._params: list[tuple[int, Any]] = []  # (owner index, parameter)
        self._parents: list[int] = []  # the index of the module each was found in
        self._by_qualname: dict[str, int] = {}
        self._settings: dict[int, str] = {}
        self._traverse(model)

    def _traverse(self, model: nn.Module) -> None:
        index_of, parents = self.index_of, self._parents
        by_name: dict[str, int] = {}
        # named_modules(), as probe selectors use it: the same order, names and overrides
        for qualname, module in model.named_modules():
            index = index_of[id(module)] = by_name[qualname] = len(self.modules)
            self.modules.append(module)
            self.qualnames.append(qualname)
            type_name = type(module).__name__
            self.types.append(type_name)
            self.labels.append(f"{qualname}: {type_name}" if qualname else type_name)
            parents.append(by_name.get(qualname.rpartition(".")[0], -1) if qualname else -1)
            prefix = qualname + "." if qualname else ""
            for name, param in module._parameters.items():
                if param is not None and self._name(param, prefix + name, index):
                    self._params.append((index, param))
            for name, buffer in module._buffers.items():
                if buffer is not None and self._name(buffer, prefix + name, index):
                    self.buffers.add(self.tensor_ids[id(buffer)])
        self._by_qualname = by_name

    def _name(self, tensor: Any, qualname: str, owner: int) -> bool:
        if id(tensor) in self.tensor_ids:
            return False
        node_id = self.tensor_ids[id(tensor)] = "param:" + qualname
        self.tensor_owner[node_id] = owner
        return True

    def settings(self, index: int) -> str:
        """The module's ``extra_repr()`` on one line (``""`` if it has none or it fails).

        >>> ModuleTable(nn.Linear(2, 3)).settings(0)
        'in_features=2, out_features=3, bias=True'
        """
        text = self._settings.get(index)
        if text is None:
            try:
                text = " ".join(str(self.modules[index].extra_repr()).split())
            except Exception:  # a user's extra_repr may fail on a half-built module
                text = ""
            self._settings[index] = text
        return text

    def module_by_qualname(self, qualname: str) -> int | None:
        """The index of the module named ``qualname``, if there is one."""
        return self._by_qualname.get(qualname)

    def all_num_params(self, in_bytes: bool = False, trainable: bool = False) -> list[int]:
        """How many parameter elements (or, ``in_bytes``, bytes) each module holds now,
        nested ones included, by index (with ``trainable``, only those that require grad);
        a lazy parameter not yet materialized counts 0."""
        totals = [0] * len(self.modules)
        for owner, param in self._params:
            if not is_lazy(param) and (param.requires_grad or not trainable):
                totals[owner] += param.numel() * (param.element_size() if in_bytes else 1)
        # named_modules() lists every module after the one it was found in: sum bottom-up
        for index in range(len(totals) - 1, 0, -1):
            totals[self._parents[index]] += totals[index]
        return totals
