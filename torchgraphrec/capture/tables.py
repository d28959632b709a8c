"""Lookup tables built once per recorder: the model's modules, parameters and buffers by identity."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

__all__ = ["ModuleTable"]

_Parameter = nn.Parameter


class ModuleTable:
    """Names of a model's modules, parameters and buffers, keyed by ``id()`` while the model lives.

    Modules are numbered in the order of ``named_modules()``, and the first name wins where
    a module or tensor is reachable under several names (tied weights, shared blocks), as
    in ``named_modules()`` and ``named_parameters()``. ``tensor_ids`` maps a parameter or
    buffer to its param node id, ``tensor_owner`` that id to the index of its module.

    >>> table = ModuleTable(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    >>> table.qualnames, table.labels, table.param_totals()[0]
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
        self.parents: list[int] = []  # the index of the module each was found in (-1: none)
        self._by_qualname: dict[str, int] = {}
        self._slots: dict[tuple[int, str], str] = {}  # (module index, name) -> param node id
        self._swapped: list[Any] = []  # parameters recognised by their slot, held
        self._nesting = (-1, 0)  # (modules counted, how deep they nest)
        # named_modules(), as probe selectors use it: the same order, names and overrides
        found = _named_modules(model)
        #: the classes of the model's modules (as found: not those a forward adds)
        self.module_types = {type(module) for _, module, _ in found}
        #: whether the model swaps other parameter objects into its modules while it runs
        #: (FSDP2's unsharded parameters): then :meth:`swapped_in` is worth asking, and the
        #: table keeps which name of which module each parameter had
        self.swaps = any(map(_swaps_parameters, self.module_types))
        #: every parameter and buffer named, held: a buffer the model replaces while it
        #: runs would be freed, and a new tensor at its address taken for it by its id
        self._named: list[Any] = self._add(found)

    def _add(self, found: list[tuple[str, nn.Module, int]]) -> list[Any]:
        """Number each ``(qualname, module, parent)`` of ``found`` (``parent``: the index of
        the module it was found in) and name its parameters and buffers; returns those it
        named (a tensor already named keeps its first name). One loop with the tables at
        hand: at every recording it runs for every module of the model."""
        index_of, by_qualname, modules = self.index_of, self._by_qualname, self.modules
        qualnames, parents, types, labels = self.qualnames, self.parents, self.types, \
            self.labels
        tensor_ids, owners, params = self.tensor_ids, self.tensor_owner, self._params
        slots = self._slots if self.swaps else None
        named: list[Any] = []
        for qualname, module, parent in found:
            index = len(modules)
            index_of[id(module)] = by_qualname[qualname] = index
            modules.append(module)
            qualnames.append(qualname)
            parents.append(parent)
            type_name = type(module).__name__
            types.append(type_name)
            labels.append(f"{qualname}: {type_name}" if qualname else type_name)
            parameters, buffers = module._parameters, module._buffers
            if not parameters and not buffers:  # most modules of deep models hold neither
                continue
            prefix = "param:" + qualname + "." if qualname else "param:"
            # the first name of a tensor reachable under several wins
            for name, param in parameters.items():
                if param is None:
                    continue
                node_id = tensor_ids.get(id(param))
                if node_id is None:
                    node_id = tensor_ids[id(param)] = prefix + name
                    owners[node_id] = index
                    params.append((index, param))
                    named.append(param)
                if slots is not None:
                    slots[(index, name)] = node_id
            for name, buffer in buffers.items():
                if buffer is not None and id(buffer) not in tensor_ids:
                    node_id = tensor_ids[id(buffer)] = prefix + name
                    owners[node_id] = index
                    self.buffers.add(node_id)
                    named.append(buffer)
        return named

    def add_module(self, parent: nn.Module, name: str, module: nn.Module) -> list[Any]:
        """Number ``module``, which the model's module ``parent`` is registering as ``name``
        (built in a forward), and everything in it; returns their parameters and buffers.
        Nothing is added under a name the table has given already (a module replaced)."""
        owner = self.index_of.get(id(parent))
        if owner is None or id(module) in self.index_of:
            return []
        stem = f"{self.qualnames[owner]}.{name}" if self.qualnames[owner] else name
        if stem in self._by_qualname:  # its layer ids would be the replaced module's
            return []
        found = []
        for qualname, inner, _ in _named_modules(module):
            qualname = f"{stem}.{qualname}" if qualname else stem
            if id(inner) in self.index_of:  # reachable under an earlier name already
                continue
            above = self._by_qualname.get(qualname.rpartition(".")[0], owner)
            found += self._add([(qualname, inner, above)])
        self._named += found
        return found

    def add_tensor(self, module: nn.Module, name: str, tensor: Any, buffer: bool) -> bool:
        """Name the parameter (or buffer) that the model's ``module`` is registering as
        ``name``; whether it is new to the table. A tensor assigned under a name the table
        has given already (``self.acc = self.acc + x``) is not: it is a new value, read from
        whatever made it, and the name's param node stays its first value's."""
        owner = self.index_of.get(id(module))
        if owner is None or tensor is None or id(tensor) in self.tensor_ids:
            return False
        qualname = self.qualnames[owner]
        node_id = f"param:{qualname}.{name}" if qualname else f"param:{name}"
        if node_id in self.tensor_owner:
            return False
        self.tensor_ids[id(tensor)] = node_id
        self.tensor_owner[node_id] = owner
        self._named.append(tensor)
        if buffer:
            self.buffers.add(node_id)
        else:
            self._params.append((owner, tensor))
        return True

    def swapped_in(self, tensor: Any, modules: list[int]) -> Any:
        """The param node id of ``tensor`` where it is a parameter that one of the modules
        ``modules`` (indices, the innermost last) holds now under a name the table gave
        another object (FSDP2 swaps its unsharded parameters in for the forward); it is
        known by its identity from then on. ``None`` for any other tensor."""
        for index in reversed(modules):
            for name, param in self.modules[index]._parameters.items():
                if param is tensor:
                    node_id = self._slots.get((index, name))
                    if node_id is not None:
                        self.tensor_ids[id(tensor)] = node_id
                        self._swapped.append(tensor)  # its id stays its own
                    return node_id
        return None

    def aliased_in(self, tensor: Any, module: int) -> Any:
        """``(param node id, parameter)`` of the parameter of module ``module`` (its subtree)
        whose memory ``tensor`` is, exactly: a detached alias no op made visibly
        (TorchScript detaches its inputs; torch 2.7 hands the caller another tensor than the
        dispatch mode saw). ``None`` for any other tensor, and for tensors without memory
        (meta, wrappers)."""
        key = _memory(tensor)
        if key is None:
            return None
        for param in self.modules[module].parameters():
            if param is not tensor and _memory(param) == key:
                node = self.tensor_ids.get(id(param))
                return (node, param) if node is not None else None
        return None

    def settings(self, index: int) -> str:
        """The module's ``extra_repr()`` on one line (``""`` if it has none or it fails).

        >>> ModuleTable(nn.Linear(2, 3)).settings(0)
        'in_features=2, out_features=3, bias=True'
        """
        try:
            text = str(self.modules[index].extra_repr())
        except Exception:  # noqa: BLE001 - a user's extra_repr may fail on a half-built module
            return ""
        # already one line, single-spaced (the usual): what split() and join() would give
        if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
            return text
        return " ".join(text.split())

    def nesting(self) -> int:
        """How many levels the modules nest below the model (0: it has no children).

        >>> ModuleTable(nn.Sequential(nn.Sequential(nn.Linear(1, 1)), nn.ReLU())).nesting()
        2
        """
        # asked at every forward: only the modules a forward builds change it
        if self._nesting[0] != len(self.parents):
            depths = [0] * len(self.parents)
            for index, parent in enumerate(self.parents):  # a module comes after its parent
                if parent >= 0:
                    depths[index] = depths[parent] + 1
            self._nesting = (len(self.parents), max(depths, default=0))
        return self._nesting[1]

    def module_by_qualname(self, qualname: str) -> int | None:
        """The index of the module named ``qualname``, if there is one."""
        return self._by_qualname.get(qualname)

    def parameters(self) -> list[Any]:
        """The model's parameters, each once, as ``model.parameters()`` lists them (without
        walking the model again: that costs more than the forward of a small layer).

        >>> [tuple(p.shape) for p in ModuleTable(nn.Linear(2, 3)).parameters()]
        [(3, 2), (3,)]
        """
        return [param for _, param in self._params]

    def param_totals(self) -> tuple[list[int], list[int], list[int]]:
        """How many parameter elements, bytes and trainable elements (those that require
        grad) each module holds now, nested ones included, by index; a lazy parameter not
        yet materialized counts 0."""
        size = len(self.modules)
        counts, sizes, trainable = [0] * size, [0] * size, [0] * size
        for owner, param in self._params:
            # the type first: is_lazy's isinstance costs more, for every parameter
            if type(param) is _Parameter or not is_lazy(param):
                count = param.numel()
                counts[owner] += count
                sizes[owner] += count * param.element_size()
                if param.requires_grad:
                    trainable[owner] += count
        # named_modules() lists every module after the one it was found in: sum bottom-up
        parents = self.parents
        for index in range(size - 1, 0, -1):
            parent = parents[index]
            counts[parent] += counts[index]
            sizes[parent] += sizes[index]
            trainable[parent] += trainable[index]
        return counts, sizes, trainable


@functools.lru_cache(maxsize=1024)
def _swaps_parameters(module_type: type) -> bool:
    """Whether modules of ``module_type`` are managed by FSDP2 (``fully_shard``), which
    swaps its unsharded parameters into the modules for the forward (asked once per type:
    the table is built at every recording)."""
    return any(cls.__name__ == "FSDPModule" and cls.__module__.startswith("torch.distributed")
               for cls in module_type.__mro__)


def _named_modules(model: nn.Module) -> list[tuple[str, nn.Module, int]]:
    """``list(model.named_modules())``, each with the position in the list of the module it
    was found in (-1 for ``model``), walked with a stack instead of a generator per module
    (a third cheaper on deep models); a model with a module that has its own
    ``named_modules`` gets what that returns.

    >>> shared = nn.Linear(1, 1)
    >>> [(name, parent) for name, _, parent in
    ...  _named_modules(nn.Sequential(shared, nn.Sequential(nn.ReLU()), shared))]
    [('', -1), ('0', 0), ('1', 0), ('1.0', 2)]
    """
    original = nn.Module.named_modules
    found: list[tuple[str, nn.Module, int]] = []
    seen: set[nn.Module] = set()
    stack = [("", model, -1)]
    pop, push = stack.pop, stack.append
    while stack:
        prefix, module, parent = pop()
        if type(module).named_modules is not original or "named_modules" in module.__dict__:
            return _with_parents(list(model.named_modules()))
        if module in seen:  # named_modules() lists a module once, under its first name
            continue
        seen.add(module)
        position = len(found)
        found.append((prefix, module, parent))
        children = module._modules
        if children:
            dot = prefix + "." if prefix else ""
            for name, child in reversed(children.items()):
                if child is not None:
                    push((dot + name, child, position))
    return found


def _with_parents(named: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module, int]]:
    """``named`` with the position of each one's parent, found by its qualname."""
    positions: dict[str, int] = {}
    found = []
    for qualname, module in named:
        parent = positions.get(qualname.rpartition(".")[0], -1) if qualname else -1
        positions[qualname] = len(found)
        found.append((qualname, module, parent))
    return found


def _memory(tensor: Any) -> Any:
    """Where ``tensor``'s elements are and how it reads them, or ``None`` where it has no
    memory of its own to compare (a meta tensor's address is 0 for all).

    >>> w = torch.ones(2, 3)
    >>> _memory(w.detach()) == _memory(w), _memory(w.t()) == _memory(w)
    (True, False)
    """
    try:
        address = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
    if not address:
        return None
    return (address, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()),
            tensor.dtype, tensor.device)
