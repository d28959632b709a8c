"""Finding the tensors inside nested arguments and outputs."""

from __future__ import annotations

import dataclasses
import inspect
import weakref
from typing import Any, Callable

import torch

__all__ = ["flatten_tensors", "tensors_with_paths", "input_names", "output_names"]

_Tensor = torch.Tensor
_ATOMS = frozenset({bool, int, float, str, bytes, complex})


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Return the tensors in ``value``, depth first, in the order they appear.

    ``value`` may nest tuples, lists, dicts (``ModelOutput`` included), dataclasses,
    ``None`` and other non-tensor values to any depth; a container that holds itself is
    visited once. Nothing is copied and generators are left unconsumed.

    >>> import torch
    >>> a, b = torch.zeros(1), torch.ones(2)
    >>> [t.shape[0] for t in flatten_tensors({"x": (a, None), "y": [b, "text"]})]
    [1, 2]
    """
    if type(value) is tuple and len(value) == 1 and isinstance(value[0], _Tensor):
        return [value[0]]  # the common case of a module called with one tensor
    if isinstance(value, _Tensor):
        return [value]
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Tensor):
            found.append(item)
            continue
        if item is None or type(item) in _ATOMS:  # most keyword values: flags, sizes, names
            continue
        if isinstance(item, (tuple, list)):
            children = item
        elif isinstance(item, dict):
            children = list(item.values())  # a subclass may make values() a generator
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [getattr(item, field.name) for field in dataclasses.fields(item)]
        else:
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        stack += reversed(children)  # type: ignore[call-overload]
    return found


def tensors_with_paths(value: Any, root: str = "") -> list[tuple[str, torch.Tensor]]:
    """The tensors in ``value`` with their paths inside it, depth first.

    >>> import torch
    >>> found = tensors_with_paths({"x": (torch.zeros(1), None), "y": [torch.ones(2)]})
    >>> [path for path, _ in found]
    ["['x'][0]", "['y'][0]"]
    >>> tensors_with_paths(torch.zeros(1))[0][0]
    ''
    """
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(root, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _Tensor):
            found.append((path, item))
            continue
        children = _named_children(item)
        if children is None or id(item) in seen:
            continue
        seen.add(id(item))
        stack.extend(reversed([(path + name, child) for name, child in children]))
    return found


def _named_children(item: Any) -> list[tuple[str, Any]] | None:
    if isinstance(item, (tuple, list)):
        return [(f"[{index}]", child) for index, child in enumerate(item)]
    # a dataclass first: Hugging Face's ModelOutput is a dict too, read as output.logits
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [(f".{field.name}", getattr(item, field.name)) for field in dataclasses.fields(item)]
    if isinstance(item, dict):
        return [(f"[{key!r}]", child) for key, child in item.items()]
    return None


#: A ``forward``'s signature by its function (bound methods by theirs, without ``self``):
#: reading one costs more than the rest of recording a small model's first call.
_SIGNATURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _signature(forward: Callable[..., Any]) -> inspect.Signature:
    function = getattr(forward, "__func__", forward)
    bound = hasattr(forward, "__self__")  # a method's signature leaves out ``self``
    found = _SIGNATURES.get(function)
    if found is not None and found[0] == bound:
        return found[1]
    signature = inspect.signature(forward)
    try:
        _SIGNATURES[function] = (bound, signature)
    except TypeError:  # not weakly referable: read each time
        pass
    return signature


def _bound_names(forward: Callable[..., Any], args: tuple,
                 kwargs: dict) -> list[tuple[str, Any]] | None:
    try:
        bound = _signature(forward).bind(*args, **kwargs)
    except (TypeError, ValueError):  # no signature, or the arguments do not fit it
        return None
    named: list[tuple[str, Any]] = []
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            named += [(f"{name}[{index}]", item) for index, item in enumerate(value)]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named += list(value.items())
        else:
            named.append((name, value))
    return named


def input_names(forward: Callable[..., Any], args: tuple,
                kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """The tensors a call received, each named by the ``forward`` parameter it was bound
    to (``args[2]`` for ``*args``, the key for ``**kwargs``) and its path inside it.

    >>> import torch
    >>> def forward(x, mask=None, *rest, **extra): ...
    >>> a = torch.zeros(1)
    >>> [name for name, _ in input_names(forward, (a, {"m": a}, a), {"scale": a})]
    ['x', "mask['m']", 'rest[0]', 'scale']
    """
    named = _bound_names(forward, args, kwargs)
    if named is None:
        named = [(f"args[{index}]", value) for index, value in enumerate(args)]
        named += list(kwargs.items())
    found: list[tuple[str, torch.Tensor]] = []
    for name, value in named:
        found += tensors_with_paths(value, name)
    return found


def output_names(output: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors in what a model returned, named by their path in it.

    >>> import torch
    >>> [name for name, _ in output_names((torch.zeros(1), {"logits": torch.ones(1)}))]
    ['output[0]', "output[1]['logits']"]
    """
    return tensors_with_paths(output, "output")
