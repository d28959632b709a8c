"""The private or version-dependent torch.distributed names, re-exported by torchgraphrec._torch."""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch

__all__ = ["C10D_DISPATCHES_TORCH_FUNCTION", "dtensor_local", "dtensor_type",
           "fsdp_sharded_params", "in_sharding_propagation", "is_functional_collective",
           "resolve_process_group", "unbox_process_group"]


def _c10d_dispatches_torch_function() -> bool:
    try:
        from torch.distributed import distributed_c10d
    except ImportError:  # a build without torch.distributed
        return False
    return hasattr(distributed_c10d, "handle_torch_function")


#: Whether ``torch.distributed``'s collectives (``all_reduce``, ``broadcast``...) take part
#: in torch-function dispatch, so that a torch-function mode sees them (older releases call
#: the backend directly).
C10D_DISPATCHES_TORCH_FUNCTION: bool = _c10d_dispatches_torch_function()


def resolve_process_group(group_name: str) -> Any:
    """The process group named ``group_name`` (the name the functional collectives take);
    raises ``LookupError`` where this torch cannot resolve names or knows none such."""
    import torch.distributed.distributed_c10d as c10d

    resolve = getattr(c10d, "_resolve_process_group", None)
    if resolve is None:
        raise LookupError("this torch cannot resolve a process group by name "
                          "(torch.distributed.distributed_c10d._resolve_process_group)")
    try:
        return resolve(group_name)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise LookupError(f"no process group named {group_name!r}: {exc}") from None


def is_functional_collective(func: Any) -> bool:
    """Whether ``func`` is one of the functional collectives' ops
    (``torch.ops._c10d_functional.*``, which ``torch.distributed._functional_collectives``
    calls), as a torch-function mode is handed them.

    >>> is_functional_collective(torch.ops._c10d_functional.all_reduce)
    True
    >>> is_functional_collective(torch.add)
    False
    """
    return getattr(func, "__module__", "") == "torch._ops._c10d_functional"


_DTENSOR_MODULES = ("torch.distributed.tensor", "torch.distributed._tensor")
_LOADED_DTENSOR: list[type] = []


def dtensor_type() -> Optional[type]:
    """The ``DTensor`` class (``torch.distributed.tensor``, before torch 2.5
    ``torch.distributed._tensor``) where its module is loaded, else ``None``.

    It never imports that module: no DTensor exists before it is loaded, and importing it
    takes about half a second, which recording a model without DTensors should not pay.

    >>> dtensor_type() is None or dtensor_type().__name__ == "DTensor"
    True
    """
    if _LOADED_DTENSOR:
        return _LOADED_DTENSOR[0]
    for name in _DTENSOR_MODULES:
        found = getattr(sys.modules.get(name), "DTensor", None)
        if isinstance(found, type):
            _LOADED_DTENSOR.append(found)  # a loaded module stays loaded
            return found
    return None


#: Where ``ShardingPropagator`` lives (before torch 2.5 under ``_tensor``).
_SHARDING_PROP_MODULES = ("torch.distributed.tensor._sharding_prop",
                          "torch.distributed._tensor._sharding_prop")
_PROPAGATION_CODES: list[frozenset] = []


def _propagation_codes() -> frozenset:
    """The code objects of ``ShardingPropagator``'s methods that run an op on fake tensors
    of the global shapes to find its output's metadata (``_propagate_tensor_meta*``)."""
    if _PROPAGATION_CODES:
        return _PROPAGATION_CODES[0]
    codes = set()
    for name in _SHARDING_PROP_MODULES:
        propagator = getattr(sys.modules.get(name), "ShardingPropagator", None)
        for attribute, value in vars(propagator or object).items():
            code = getattr(getattr(value, "__wrapped__", value), "__code__", None)
            if attribute.startswith("_propagate_tensor_meta") and code is not None:
                codes.add(code)
    if codes:  # a loaded module stays loaded
        _PROPAGATION_CODES.append(frozenset(codes))
    return frozenset(codes)


def in_sharding_propagation() -> bool:
    """Whether ``DTensor`` is running an op on fake tensors of the global shapes to learn
    its output's shape (sharding propagation): ops that are not the model's computation.
    ``False`` wherever the propagator's module is not loaded.

    >>> in_sharding_propagation()
    False
    """
    if dtensor_type() is None:  # (asked first: cached)
        return False
    codes = _propagation_codes()
    if not codes:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def dtensor_local(tensor: Any) -> Any:
    """A ``DTensor``'s local shard as the DTensor holds it (``_local_tensor``: no autograd
    function and no torch-function call, so safe inside any mode's handler); any other
    value as it is.

    >>> x = torch.ones(2)
    >>> dtensor_local(x) is x
    True
    """
    found = dtensor_type()
    if found is not None and isinstance(tensor, found):
        return tensor._local_tensor
    return tensor


def fsdp_sharded_params(model: Any) -> dict[tuple[int, str], Any]:
    """FSDP2's sharded parameter (a ``DTensor``) of each parameter it manages in ``model``,
    by ``(id(module), name)`` of where the module holds it, whatever the parameters are now:
    FSDP2's param groups keep the sharded ones while the unsharded are in place (the root
    unit's after its forward). ``{}`` where ``model`` has no FSDP2 unit or this torch's
    FSDP2 keeps them elsewhere.

    >>> fsdp_sharded_params(torch.nn.Linear(2, 2))
    {}
    """
    found: dict[tuple[int, str], Any] = {}
    for module in model.modules():
        state_of = getattr(module, "_get_fsdp_state", None)
        try:
            state = state_of() if callable(state_of) else None
            groups = getattr(state, "_fsdp_param_groups", None)
            if groups is None:  # older releases: one group per unit
                groups = [getattr(state, "_fsdp_param_group", None)]
            for group in groups:
                for param in getattr(group, "fsdp_params", ()):
                    info = param._module_info
                    for owner, name in zip([info.module, *info.shared_modules],
                                           [info.param_name, *info.shared_param_names]):
                        found[(id(owner), name)] = param.sharded_param
        except (AttributeError, RuntimeError):  # another layout: nothing read as true
            continue
    return found


def unbox_process_group(value: Any) -> Any:
    """The ``ProcessGroup`` that a c10d op running through the dispatcher is handed (as a
    ``torch.ScriptObject``), or ``None`` for any other value.

    >>> unbox_process_group(3) is None
    True
    """
    unbox = getattr(getattr(torch.distributed, "ProcessGroup", None), "unbox", None)
    if unbox is None or not isinstance(value, torch.ScriptObject):
        return None
    try:
        return unbox(value)
    except (RuntimeError, TypeError):
        return None
