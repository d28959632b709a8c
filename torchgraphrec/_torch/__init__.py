"""Every private or version-dependent torch name in use, found by feature, with a fallback."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from types import FrameType
from typing import Any, Callable, Iterable, Iterator, Optional

import torch
from torch.nn.modules.module import register_module_forward_hook, \
    register_module_forward_pre_hook
from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef
from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes, \
    _get_current_dispatch_mode_stack

from torchgraphrec._torch.distributed import C10D_DISPATCHES_TORCH_FUNCTION, dtensor_local, \
    dtensor_type, fsdp_sharded_params, in_sharding_propagation, is_functional_collective, \
    resolve_process_group, unbox_process_group
from torchgraphrec._torch.eager import SETS_STANCE, compiled_code_eager
from torchgraphrec._torch.modeflags import DISPATCH_FLAGS, restack_dispatch_flags

__all__ = [
    "ACCUMULATE_GRAD", "DisableTorchFunction", "GLOBAL_FORWARD_HOOKS_TAKE_KWARGS",
    "HigherOrderOperator", "INLINE_ATTRIBUTES", "SAVED_TENSOR_HOOKS_READABLE", "TensorBase",
    "TorchDispatchMode", "aten_overloads", "aten_packets", "autograd_sequence_number",
    "call_kwargs", "call_kwargs_readable", "call_raised", "call_token", "current_frame",
    "give_call_kwargs", "global_module_hooks", "global_module_hooks_aside",
    "global_pre_hook_takes_kwargs_by_id", "take_call_kwargs",
    "disable_dispatch_modes", "dispatch_mode_at", "dispatch_mode_depth", "dispatch_modes",
    "exclude_python_dispatch", "function_mode_depth", "function_modes",
    "functorch_disabled", "functorch_transforms_active", "functorch_unwrapped", "graph_task_id",
    "has_composite_implicit_kernel", "modules_raised_through", "nested_sizes",
    "node_scoped_dispatch_modes", "pop_dispatch_mode", "pop_function_mode",
    "pop_saved_tensor_hooks", "push_dispatch_mode", "push_function_mode",
    "register_global_forward_hook",
    "push_saved_tensor_hooks", "queue_backward_callback", "saved_tensor_hooks_enabled",
    "storage_weak_ref",
    "top_saved_tensor_hooks", "torch_function_all_disabled",
]
__all__ += ["C10D_DISPATCHES_TORCH_FUNCTION", "dtensor_local", "dtensor_type",
            "fsdp_sharded_params", "in_sharding_propagation", "is_functional_collective",
            "resolve_process_group", "unbox_process_group"]
__all__ += ["DISPATCH_FLAGS", "restack_dispatch_flags", "SETS_STANCE", "compiled_code_eager"]

_C: Any = torch._C

#: Attributes read inline where a function call per event would cost more than the event:
#: ``(owner, attribute)``, each checked by a test of its own so that a torch release that
#: moves one fails with its name. ``Tensor._version`` names a tensor's value (the op handler
#: and the hooks); ``UntypedStorage._cdata`` a storage (the saved-tensor hook); a module's
#: ``_parameters``, ``_buffers`` and ``_modules`` are read without ``named_*()``'s generator
#: walk, which costs more than a small layer's forward; ``forward_ad._current_level`` says
#: whether forward-mode AD is on (asked per op when FLOPs are counted); an autograd
#: node's ``_sequence_nr()`` places it (read for every node of the autograd walk).
INLINE_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("Tensor", "_version"), ("UntypedStorage", "_cdata"), ("Module", "_parameters"),
    ("Module", "_buffers"), ("Module", "_modules"), ("forward_ad", "_current_level"),
    ("Node", "_sequence_nr"),
)

# -- autograd ------------------------------------------------------------------------------

#: Autograd's next sequence number: each autograd node made takes one, so the difference
#: around a call is how many nodes it made.
autograd_sequence_number: Callable[[], int] = torch.autograd._get_sequence_nr  # type: ignore[attr-defined]

#: The running backward pass's id, -1 outside one (checkpoint recomputation runs inside).
graph_task_id: Callable[[], int] = getattr(_C, "_current_graph_task_id", lambda: -1)


def _accumulate_grad_type() -> Optional[type]:
    found = getattr(getattr(_C, "_functions", None), "AccumulateGrad", None)
    if found is None:  # older releases expose it only through a leaf's gradient edge
        leaf = torch.ones(1, requires_grad=True)
        found = type((leaf * 1).grad_fn.next_functions[0][0])
    return found


#: The class of autograd's node that accumulates a leaf's gradient.
ACCUMULATE_GRAD: Optional[type] = _accumulate_grad_type()

# -- saved-tensor hooks --------------------------------------------------------------------

push_saved_tensor_hooks: Callable[[Callable, Callable], None] = \
    _C._autograd._push_saved_tensors_default_hooks
pop_saved_tensor_hooks: Callable[[], None] = _C._autograd._pop_saved_tensors_default_hooks
#: False under ``torch.autograd.graph.disable_saved_tensors_hooks``, where pushing raises.
saved_tensor_hooks_enabled: Callable[[], bool] = _C._autograd._saved_tensors_hooks_is_enabled
_top_hooks = getattr(_C._autograd, "_top_saved_tensors_default_hooks", None)

#: Whether this torch can tell which saved-tensor hooks are active, so that hooks pushed
#: above them can hand each tensor on to them (only the innermost pair runs).
SAVED_TENSOR_HOOKS_READABLE: bool = _top_hooks is not None


def top_saved_tensor_hooks() -> Optional[tuple[Callable, Callable]]:
    """The innermost active ``(pack, unpack)`` pair of saved-tensor hooks, ``None`` where
    there is none; raises ``RuntimeError`` where this torch cannot tell (see
    :data:`SAVED_TENSOR_HOOKS_READABLE`).

    >>> not SAVED_TENSOR_HOOKS_READABLE or top_saved_tensor_hooks() is None
    True
    """
    if _top_hooks is None:
        raise RuntimeError("this torch cannot read the active saved-tensor hooks "
                           "(torch._C._autograd._top_saved_tensors_default_hooks is missing)")
    return _top_hooks(False)


def storage_weak_ref(storage: Any) -> Any:
    """A weak reference to an ``UntypedStorage``: it keeps the storage's record, and so its
    address (``_cdata``), from being taken by another storage, but not its memory;
    ``expired()`` says whether the storage itself is gone.

    >>> storage = torch.zeros(2).untyped_storage()
    >>> ref = storage_weak_ref(storage)
    >>> ref.expired()
    False
    >>> del storage
    >>> ref.expired()
    True
    """
    return _StorageWeakRef(storage)


# -- torch-function modes ------------------------------------------------------------------

DisableTorchFunction: type = _C.DisableTorchFunction
function_mode_depth: Callable[[], int] = _C._len_torch_function_stack
function_modes: Callable[[], list] = _get_current_function_mode_stack
pop_function_mode: Callable[[], Any] = _pop_mode
push_function_mode: Callable[[Any], None] = _push_mode

#: Whether torch functions are off altogether, as for the recorder's own work (a subclass's
#: default ``__torch_function__`` turns off only subclass handling).
torch_function_all_disabled: Callable[[], bool] = getattr(
    _C, "_is_torch_function_all_disabled", lambda: not _C._is_torch_function_enabled())

# -- dispatch modes ------------------------------------------------------------------------

dispatch_mode_depth: Callable[[], int] = _C._len_torch_dispatch_stack
dispatch_mode_at: Callable[[int], Any] = _C._get_dispatch_stack_at
push_dispatch_mode: Callable[[Any], None] = _C._push_on_torch_dispatch_stack
#: Take the innermost mode off the dispatch stack, without leaving it, and return it (a
#: partial: this runs per op where FLOPs are counted).
pop_dispatch_mode: Callable[[], Any] = functools.partial(_C._pop_torch_dispatch_stack, None)
dispatch_modes: Callable[[], list] = _get_current_dispatch_mode_stack
#: A context in which every dispatch mode steps aside (and is put back after).
disable_dispatch_modes: Callable[[], Any] = _disable_current_modes
functorch_transforms_active: Callable[[], bool] = getattr(
    _C, "_are_functorch_transforms_active", lambda: False)
#: A context under which torch.func transforms see no op (a probe's statistics of the value
#: a transform's wrapper holds, which would otherwise come out wrapped again).
functorch_disabled: Callable[[], Any] = getattr(_C, "_DisableFuncTorch", contextlib.nullcontext)
_FUNCTORCH = getattr(_C, "_functorch", None)
_is_functorch_wrapper: Callable[[Any], bool] = getattr(
    _FUNCTORCH, "is_functorch_wrapped_tensor", lambda tensor: False)
_functorch_unwrap: Callable[[Any], Any] = getattr(_FUNCTORCH, "get_unwrapped", None)


def functorch_unwrapped(tensor: torch.Tensor) -> list:
    """What a ``torch.func`` transform's wrapper of ``tensor`` holds (vmap's batched
    tensor, ``grad``'s tracking tensor), level by level inwards; empty for any other
    tensor. The tensor a transform hands out as it returns is the innermost one itself.

    >>> x, seen = torch.ones(2, 3), []
    >>> _ = torch.func.vmap(lambda row: seen.append(functorch_unwrapped(row)) or row)(x)
    >>> [inner is x for inner in seen[0]], functorch_unwrapped(x)
    ([True], [])
    """
    found: list = []
    if _functorch_unwrap is None:
        return found
    while _is_functorch_wrapper(tensor):
        tensor = _functorch_unwrap(tensor)
        found.append(tensor)
    return found


HigherOrderOperator: type = torch._ops.HigherOrderOperator
TensorBase: type = _C.TensorBase

_PYTHON_KEYS = _C.DispatchKeySet(_C.DispatchKey.Python) | \
    _C.DispatchKeySet(_C.DispatchKey.PythonTLSSnapshot)


def exclude_python_dispatch() -> Any:
    """A guard under which no Python dispatch mode sees the ATen calls made (the
    recorder's own, inside a hook)."""
    return _C._ExcludeDispatchKeyGuard(_PYTHON_KEYS)


def has_composite_implicit_kernel(func: Any) -> bool:
    """Whether the ATen op ``func`` has a decomposition (as ``OpOverload.decompose`` decides).

    >>> has_composite_implicit_kernel(torch.ops.aten.linear.default)
    True
    >>> has_composite_implicit_kernel(torch.ops.aten.mm.default)
    False
    """
    if func is torch.ops.prim.device.default:
        return False
    key = _C.DispatchKey.CompositeImplicitAutograd
    return key in getattr(func, "py_kernels", {}) or \
        _C._dispatch_has_kernel_for_dispatch_key(func.name(), key)


# -- ATen ops ------------------------------------------------------------------------------


def aten_packets(names: Iterable[str]) -> dict[str, Any]:
    """The ATen op packets of ``names`` that this torch has (a release without one simply
    lacks it).

    >>> sorted(aten_packets(["mm", "no_such_op"]))
    ['mm']
    """
    return {name: getattr(torch.ops.aten, name) for name in names
            if hasattr(torch.ops.aten, name)}


def aten_overloads(names: Iterable[str], namespace: str = "aten") -> frozenset:
    """The ATen overloads ``"op.overload"`` of ``names`` that this torch has.

    >>> [str(op) for op in aten_overloads(["mm.default", "no_such_op.default"])]
    ['aten.mm.default']
    """
    ops = getattr(torch.ops, namespace)
    found = set()
    for name in names:
        packet_name, _, overload = name.partition(".")
        if not hasattr(ops, packet_name):
            continue
        packet = getattr(ops, packet_name)
        if overload in packet.overloads():
            found.add(getattr(packet, overload))
    return frozenset(found)


# -- tensors and modules -------------------------------------------------------------------


def nested_sizes(tensor: torch.Tensor) -> list[list[int]]:
    """The size of each component of a nested tensor.

    >>> import warnings
    >>> with warnings.catch_warnings():  # "nested tensors are a prototype"
    ...     warnings.simplefilter("ignore")
    ...     nested = torch.nested.nested_tensor([torch.zeros(2, 4), torch.zeros(3, 4)])
    >>> nested_sizes(nested)
    [[2, 4], [3, 4]]
    """
    return tensor._nested_tensor_size().tolist()


def call_token(caller: FrameType) -> Optional[set]:
    """An object made for the module call whose global forward pre-hook the frame
    ``caller`` called, which lives exactly as long as that call's frames do (a traceback
    that holds them holds it): ``Module._call_impl``'s set of the always-called hooks it
    ran, in ``caller`` (torch 2.4) or in the ``_call_impl`` that runs it (``inner``,
    later releases). ``None`` where neither holds one."""
    for frame in (caller, caller.f_back):
        found = frame.f_locals.get("called_always_called_hooks") if frame is not None else None
        if type(found) is set:
            return found
    return None


def call_kwargs(hook_frame: FrameType) -> dict:
    """The keyword arguments of the module call whose global forward pre-hook runs in
    ``hook_frame``, read from the frame of ``Module._call_impl`` that called the hook, which
    holds them as ``kwargs`` (``{}`` where it holds none)."""
    caller = hook_frame.f_back
    kwargs = caller.f_locals.get("kwargs") if caller is not None else None
    return kwargs if type(kwargs) is dict else {}


def call_raised(hook_frame: FrameType) -> bool:
    """Whether the module call whose forward hook runs in ``hook_frame`` is unwinding an
    exception its forward raised (PyTorch runs ``always_call`` hooks then): the exception
    being handled passed through the frame of ``Module._call_impl`` that called the hook
    (one a caller was already handling did not)."""
    caller = hook_frame.f_back
    trace = sys.exc_info()[2]
    while trace is not None:
        if trace.tb_frame is caller:
            return True
        trace = trace.tb_next
    return False


_CALL_IMPL_CODE = torch.nn.Module._call_impl.__code__


def modules_raised_through(exc: BaseException) -> list[torch.nn.Module]:
    """The modules whose calls ``exc`` has unwound so far, outermost first: the ``self`` of
    each frame of ``Module._call_impl`` in its traceback. The last is the module whose call
    raised, in its forward or in a hook of its own that ran after ours."""
    found = []
    trace = exc.__traceback__
    while trace is not None:
        frame = trace.tb_frame
        if frame.f_code is _CALL_IMPL_CODE:
            module = frame.f_locals.get("self")
            if isinstance(module, torch.nn.Module):
                found.append(module)
        trace = trace.tb_next
    return found


#: The module-level dicts of global module hooks that ``Module._call_impl`` runs around
#: every call, or its backward, of every module (those this torch has).
_GLOBAL_CALL_HOOKS: tuple[dict, ...] = tuple(
    getattr(torch.nn.modules.module, name) for name in (
        "_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
        "_global_backward_hooks") if hasattr(torch.nn.modules.module, name))


def global_module_hooks() -> int:
    """How many global module hooks (``register_module_forward_pre_hook`` and the like) are
    registered now: each runs at every module call of the process.

    >>> before = global_module_hooks()
    >>> handle = register_module_forward_pre_hook(lambda module, args: None)
    >>> global_module_hooks() - before
    1
    >>> handle.remove()
    """
    return sum(map(len, _GLOBAL_CALL_HOOKS))


_GLOBAL_FORWARD_HOOKS_WITH_KWARGS: dict = getattr(
    torch.nn.modules.module, "_global_forward_hooks_with_kwargs", {})


class _GlobalForwardHookHandle:
    """The handle of a global forward hook, whose ``remove()`` also takes the hook's id out
    of torch's table of global hooks given keyword arguments, where torch leaves it (one
    entry per registration, kept for the life of the process)."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @property
    def id(self) -> int:
        return self._handle.id

    def remove(self) -> None:
        self._handle.remove()
        _GLOBAL_FORWARD_HOOKS_WITH_KWARGS.pop(self._handle.id, None)


def register_global_forward_hook(hook: Callable, **options: bool) -> Any:
    """``register_module_forward_hook(hook, **options)``, with a handle that leaves nothing
    of the hook behind once removed.

    >>> before = dict(_GLOBAL_FORWARD_HOOKS_WITH_KWARGS)
    >>> options = {"with_kwargs": True} if GLOBAL_FORWARD_HOOKS_TAKE_KWARGS else {}
    >>> handle = register_global_forward_hook(lambda *args: None, **options)
    >>> handle.remove()
    >>> _GLOBAL_FORWARD_HOOKS_WITH_KWARGS == before
    True
    """
    return _GlobalForwardHookHandle(register_module_forward_hook(hook, **options))


@contextlib.contextmanager
def global_module_hooks_aside() -> Iterator[None]:
    """The global module hooks registered now set aside for the block, and put back after
    in their order (any registered meanwhile after them): a feature probe's module call
    then reaches no hook of the user's, which may not expect a call without tensors. Only
    for a few microseconds: a module call on another thread meanwhile would miss them too.

    >>> seen = []
    >>> handle = register_module_forward_pre_hook(lambda module, args: seen.append(module))
    >>> with global_module_hooks_aside():
    ...     _ = torch.nn.Identity()(None)
    >>> _ = torch.nn.Identity()(None)
    >>> len(seen)
    1
    >>> handle.remove()
    """
    saved = [(hooks, dict(hooks)) for hooks in _GLOBAL_CALL_HOOKS]
    for hooks, _ in saved:
        hooks.clear()
    try:
        yield
    finally:
        for hooks, entries in saved:
            added = dict(hooks)
            hooks.clear()
            hooks.update(entries)
            hooks.update(added)


@contextlib.contextmanager
def _probe_pre_hook(look: Callable) -> Iterator[Any]:
    """``look`` as the only global forward pre-hook for the block (its handle given): a
    feature probe's call, made without tensors so that no mode of the user's sees it, then
    reaches no hook of the user's either."""
    with global_module_hooks_aside():
        handle = register_module_forward_pre_hook(look)
        try:
            yield handle
        finally:
            handle.remove()


@functools.lru_cache(maxsize=None)
def call_kwargs_readable() -> bool:
    """Whether a global forward pre-hook can read its call's keyword arguments with
    :func:`call_kwargs` (PyTorch gives global pre-hooks none; per-module pre-hooks are given
    them, but PyTorch's ``TransformerEncoderLayer`` refuses its fused fast path when any are
    attached).

    >>> call_kwargs_readable()
    True
    """
    found: list = []
    probe = torch.nn.Identity()

    def look(module: torch.nn.Module, args: tuple) -> None:
        if module is probe:
            found.append(call_kwargs(current_frame()))

    with _probe_pre_hook(look):
        probe(input=None)
    return bool(found) and "input" in found[0]


def give_call_kwargs(modules: Iterable[torch.nn.Module], hook_id: int) -> list[dict]:
    """Have the global forward pre-hook whose handle id is ``hook_id`` given each of
    ``modules``' calls' keyword arguments, as a module's own pre-hook registered
    ``with_kwargs`` is: ``Module._call_impl`` asks the module's
    ``_forward_pre_hooks_with_kwargs`` for every pre-hook's id, global ones too, and
    ``TransformerEncoderLayer``'s fast path counts only the hooks themselves. Returns the
    tables written into, for :func:`take_call_kwargs`."""
    tables = []
    for module in modules:
        table = module.__dict__.get("_forward_pre_hooks_with_kwargs")
        if table is not None:
            table[hook_id] = True
            tables.append(table)
    return tables


def take_call_kwargs(tables: Iterable[dict], hook_id: int) -> None:
    """Undo :func:`give_call_kwargs` on the tables it returned."""
    for table in tables:
        table.pop(hook_id, None)


@functools.lru_cache(maxsize=None)
def global_pre_hook_takes_kwargs_by_id() -> bool:
    """Whether :func:`give_call_kwargs` works on this torch (the call's keyword arguments
    reach the global pre-hook, and are gone again once taken back).

    >>> global_pre_hook_takes_kwargs_by_id()
    True
    """
    found: list = []
    probe = torch.nn.Identity()

    def look(module: torch.nn.Module, args: tuple, kwargs: Optional[dict] = None) -> None:
        if module is probe:
            found.append(kwargs)

    with _probe_pre_hook(look) as handle:
        tables = give_call_kwargs([probe], handle.id)
        probe(input=None)
        take_call_kwargs(tables, handle.id)
        probe(input=None)
    return len(found) == 2 and found[0] == {"input": None} and found[1] is None


def _takes_keyword(function: Callable, name: str) -> bool:
    return name in inspect.signature(function).parameters


#: Whether PyTorch's global forward hooks can be given each call's keyword arguments (and so
#: tell a call that raised, which they are then given none of): where not, the recorder
#: hooks each module instead.
GLOBAL_FORWARD_HOOKS_TAKE_KWARGS: bool = _takes_keyword(register_module_forward_hook,
                                                        "with_kwargs")

#: The frame of the running function (CPython's).
current_frame: Callable[[], FrameType] = sys._getframe


def queue_backward_callback(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the running backward pass ends, after the callbacks queued
    before it (DDP queues its gradient averaging there); a callback may queue another,
    which runs after those queued meanwhile. Only inside a backward pass."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


class _PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        return func(*args, **(kwargs or {}))


@functools.lru_cache(maxsize=None)
def node_scoped_dispatch_modes() -> bool:
    """Whether autograd restores the dispatch modes after each node it runs and after its
    final callbacks, so that a mode pushed from a backward hook lasts only while that node
    (or those callbacks) run; checked once on a one-op backward, hidden from the modes."""
    inside: list[int] = []
    mode = _PassThrough()
    with disable_dispatch_modes(), DisableTorchFunction(), torch.enable_grad():
        base = dispatch_mode_depth()
        leaf = torch.ones(1, requires_grad=True)
        product = leaf * 2

        def push(grad: Any) -> None:
            push_dispatch_mode(mode)
            queue_backward_callback(lambda: (push_dispatch_mode(mode), queue_backward_callback(
                lambda: inside.append(dispatch_mode_depth()))))

        product.grad_fn.register_prehook(push)
        try:
            torch.autograd.backward(product)
            scoped = dispatch_mode_depth() == base and inside == [base + 1]
        except RuntimeError:
            scoped = False
        while dispatch_mode_depth() > base:  # a torch that leaves them: undone here
            pop_dispatch_mode()
    return scoped
