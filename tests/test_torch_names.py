"""Each private or version-dependent torch name in torchgraphrec._torch does what the package needs of it.

One test per name, named after it: a torch release that moves one fails that test alone.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
import weakref
from typing import Any, Optional

import pytest
import torch
from torch import nn
from torch.autograd import forward_ad
from torch.overrides import TorchFunctionMode

from helpers import one_rank_group
from torchgraphrec import _torch


class _Passing(_torch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


class _Seeing(_torch.TorchDispatchMode):
    """Notes the ATen ops it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_autograd_sequence_number_counts_autograd_nodes() -> None:
    x = torch.ones(2, requires_grad=True)
    before = _torch.autograd_sequence_number()
    y = (x * 2).sum()
    assert _torch.autograd_sequence_number() - before == 2
    assert y.grad_fn._sequence_nr() == before + 1  # Node._sequence_nr, read inline


def test_graph_task_id_is_negative_outside_a_backward_and_not_inside() -> None:
    inside: list[int] = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda grad: inside.append(_torch.graph_task_id()))
    assert _torch.graph_task_id() < 0
    y.sum().backward()
    assert inside and inside[0] >= 0


def test_accumulate_grad_is_the_class_of_a_leafs_gradient_node() -> None:
    leaf = torch.ones(1, requires_grad=True)
    assert type((leaf * 2).grad_fn.next_functions[0][0]) is _torch.ACCUMULATE_GRAD


def test_saved_tensor_hooks_push_pop_and_top() -> None:
    packed: list[torch.Size] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        packed.append(tensor.shape)
        return tensor

    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    x = torch.ones(3, requires_grad=True)
    _torch.push_saved_tensor_hooks(pack, unpack)
    try:
        if _torch.SAVED_TENSOR_HOOKS_READABLE:
            assert _torch.top_saved_tensor_hooks() == (pack, unpack)
        (x * x).sum().backward()
    finally:
        _torch.pop_saved_tensor_hooks()
    assert packed == [torch.Size([3]), torch.Size([3])]
    assert torch.equal(x.grad, 2 * x.detach())
    if _torch.SAVED_TENSOR_HOOKS_READABLE:
        assert _torch.top_saved_tensor_hooks() is None


def test_top_saved_tensor_hooks_says_clearly_where_torch_cannot_tell() -> None:
    if _torch.SAVED_TENSOR_HOOKS_READABLE:
        with torch.autograd.graph.save_on_cpu():
            assert _torch.top_saved_tensor_hooks() is not None
    else:
        with pytest.raises(RuntimeError, match="cannot read the active saved-tensor hooks"):
            _torch.top_saved_tensor_hooks()


def test_function_mode_stack_depth_push_and_pop() -> None:
    assert _torch.function_mode_depth() == 0
    with TorchFunctionMode() as mode:
        assert _torch.function_mode_depth() == 1
        assert _torch.function_modes() == [mode]
        popped = _torch.pop_function_mode()
        assert popped is mode and _torch.function_mode_depth() == 0
        _torch.push_function_mode(popped)
    assert _torch.function_mode_depth() == 0


def test_disable_torch_function_hides_calls_from_function_modes() -> None:
    seen: list[object] = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Mode():
        with _torch.DisableTorchFunction():
            torch.ones(1) + 1
            assert _torch.torch_function_all_disabled()
        assert not _torch.torch_function_all_disabled()
    assert seen == []


def test_dispatch_mode_stack_depth_at_push_and_pop() -> None:
    base = _torch.dispatch_mode_depth()
    with _Passing() as mode:
        assert _torch.dispatch_mode_depth() == base + 1
        assert _torch.dispatch_mode_at(base) is mode
        assert mode in _torch.dispatch_modes()
        popped = _torch.pop_dispatch_mode()
        assert popped is mode and _torch.dispatch_mode_depth() == base
        _torch.push_dispatch_mode(popped)
    assert _torch.dispatch_mode_depth() == base


def test_exclude_python_dispatch_hides_calls_from_dispatch_modes() -> None:
    with _Seeing() as mode:
        torch.ones(2).detach()
        before = len(mode.seen)
        with _torch.exclude_python_dispatch():
            torch.ones(2).detach()
    assert before > 0 and len(mode.seen) == before


def test_functorch_transforms_active_inside_vmap_only() -> None:
    inside: list[bool] = []

    def look(x: torch.Tensor) -> torch.Tensor:
        inside.append(_torch.functorch_transforms_active())
        return x * 2

    torch.func.vmap(look)(torch.ones(3, 2))
    assert inside == [True]
    assert not _torch.functorch_transforms_active()


def test_higher_order_operator_is_the_class_of_torch_ops_higher_order() -> None:
    assert isinstance(torch.ops.higher_order.cond, _torch.HigherOrderOperator)


def test_tensor_base_owns_the_tensor_methods_written_in_c() -> None:
    assert torch.Tensor.add.__objclass__ is _torch.TensorBase


def test_has_composite_implicit_kernel() -> None:
    assert _torch.has_composite_implicit_kernel(torch.ops.aten.linear.default)
    assert not _torch.has_composite_implicit_kernel(torch.ops.aten.addmm.default)


def test_aten_packets_and_overloads_leave_out_what_this_torch_lacks() -> None:
    assert list(_torch.aten_packets(["addmm", "not_an_op"])) == ["addmm"]
    found = _torch.aten_overloads(["addmm.default", "addmm.not_an_overload", "not_an_op.default"])
    assert found == frozenset({torch.ops.aten.addmm.default})
    assert _torch.aten_overloads(["layout.default"], namespace="prim") == \
        frozenset({torch.ops.prim.layout.default})


def test_nested_sizes() -> None:
    with warnings.catch_warnings():  # "nested tensors are a prototype", once per process
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)])
    assert _torch.nested_sizes(nested) == [[2, 3], [4, 3]]


def test_call_token_is_made_for_the_call_and_goes_with_its_frames() -> None:
    found: list = []
    probe = nn.Identity()

    def look(module: nn.Module, args: tuple) -> None:
        if module is probe:
            token = _torch.call_token(_torch.current_frame().f_back)
            found.append((type(token), weakref.ref(token)))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(look)
    try:
        probe(torch.ones(1))
        probe(torch.ones(1))
    finally:
        handle.remove()
    [(kind, first), (_, second)] = found
    assert kind is set and first() is None and second() is None and first is not second


def test_call_kwargs_read_from_a_global_pre_hooks_caller() -> None:
    found: list[dict] = []
    probe = nn.Identity()

    def look(module: nn.Module, args: tuple) -> None:
        if module is probe:
            found.append(_torch.call_kwargs(_torch.current_frame()))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(look)
    try:
        probe(input=torch.ones(1))
    finally:
        handle.remove()
    assert list(found[0]) == ["input"]
    assert _torch.call_kwargs_readable()


def test_give_call_kwargs_hands_a_global_pre_hook_the_keyword_arguments() -> None:
    found: list = []
    model = nn.Sequential(nn.Identity())
    inner = model[0]

    def look(module: nn.Module, args: tuple, kwargs: Optional[dict] = None) -> None:
        if module is inner:
            found.append(kwargs)

    before = [dict(m._forward_pre_hooks_with_kwargs) for m in model.modules()]
    x = torch.ones(1)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(look)
    try:
        tables = _torch.give_call_kwargs(model.modules(), handle.id)
        inner(input=x)
        _torch.take_call_kwargs(tables, handle.id)
        inner(input=x)
    finally:
        handle.remove()
    assert len(tables) == 2
    assert found[0] == {"input": x} and found[0]["input"] is x
    assert found[1] is None  # taken back: torch calls the hook without them again
    assert [dict(m._forward_pre_hooks_with_kwargs) for m in model.modules()] == before
    assert _torch.global_pre_hook_takes_kwargs_by_id()


def test_call_kwargs_of_a_frame_without_them_is_empty() -> None:
    def frame_without_kwargs() -> dict:
        return _torch.call_kwargs(_torch.current_frame())

    assert frame_without_kwargs() == {}


@pytest.mark.parametrize("owner, attribute", _torch.INLINE_ATTRIBUTES,
                         ids=[".".join(pair) for pair in _torch.INLINE_ATTRIBUTES])
def test_inline_attribute(owner: str, attribute: str) -> None:
    x = torch.ones(2, requires_grad=True)
    module = nn.Linear(2, 2)
    instances = {"Tensor": x, "UntypedStorage": x.untyped_storage(), "Module": module,
                 "forward_ad": forward_ad, "Node": (x * 2).grad_fn}
    value = getattr(instances[owner], attribute)
    if (owner, attribute) == ("Tensor", "_version"):
        before = value
        with torch.no_grad():
            x.add_(1)
        assert x._version == before + 1
    elif owner == "Module":
        assert isinstance(value, dict)
    elif owner == "forward_ad":
        assert value == -1
        with forward_ad.dual_level():
            assert forward_ad._current_level >= 0
    elif owner == "UntypedStorage":
        assert value == x.detach().untyped_storage()._cdata != torch.ones(1).untyped_storage()._cdata
    else:
        assert callable(value) and isinstance(value(), int)


def test_every_public_name_has_a_test_here() -> None:
    import inspect

    source = inspect.getsource(inspect.getmodule(test_inline_attribute))  # type: ignore[arg-type]
    untested = [name for name in _torch.__all__ if f"_torch.{name}" not in source]
    assert untested == []


def test_no_module_but_torchgraphrec_torch_reaches_into_private_torch() -> None:
    import pathlib
    import re

    package = pathlib.Path(_torch.__file__).parent
    private = re.compile(r"(?<![\"'])torch\._C\b|torch\._ops\b|torch\.utils\._python_dispatch|"
                         r"_get_sequence_nr|torch\.overrides import _")
    offenders = [str(path.relative_to(package)) for path in package.rglob("*.py")
                 if path.parent.name != "_torch" and private.search(path.read_text())]
    assert offenders == []


def test_saved_tensor_hooks_enabled() -> None:
    assert _torch.saved_tensor_hooks_enabled()
    with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
        assert not _torch.saved_tensor_hooks_enabled()


def test_global_forward_hooks_take_kwargs_as_detected() -> None:
    import inspect

    takes = "with_kwargs" in inspect.signature(
        torch.nn.modules.module.register_module_forward_hook).parameters
    assert _torch.GLOBAL_FORWARD_HOOKS_TAKE_KWARGS is takes


def test_call_raised_tells_a_raising_forward_from_one_run_while_handling_another() -> None:
    seen: list[bool] = []

    class Raises(nn.Module):
        def forward(self, x: torch.Tensor) -> None:
            raise ValueError("inside")

    class ReturnsNone(nn.Module):
        def forward(self, x: torch.Tensor) -> None:
            return None

    def look(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        seen.append(_torch.call_raised(_torch.current_frame()))

    raising, quiet = Raises(), ReturnsNone()
    for module in (raising, quiet):
        module.register_forward_hook(look, with_kwargs=True, always_call=True)
    with pytest.raises(ValueError, match="inside"):
        raising(torch.ones(1))
    try:
        raise KeyError("a caller's own")
    except KeyError:
        quiet(torch.ones(1))
    assert seen == [True, False]


def test_modules_raised_through_ends_at_the_module_whose_own_hook_raised() -> None:
    def bad(module: nn.Module, args: tuple, output: object) -> None:
        raise ValueError("a hook's")

    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Tanh()))
    model[1][0].register_forward_hook(bad)
    with pytest.raises(ValueError, match="a hook's") as caught:
        model(torch.ones(1, 2))
    assert _torch.modules_raised_through(caught.value) == [model, model[1], model[1][0]]


def test_disable_dispatch_modes_sets_every_mode_aside_and_back() -> None:
    with _Seeing() as mode:
        with _torch.disable_dispatch_modes():
            assert _torch.dispatch_mode_depth() == 0
            torch.ones(2).detach()
        assert _torch.dispatch_modes() == [mode]
    assert mode.seen == []


def test_resolve_process_group_finds_a_group_by_its_name(tmp_path) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch is built without torch.distributed")
    with one_rank_group(tmp_path):
        group = dist.group.WORLD
        assert _torch.resolve_process_group(group.group_name) is group
        with pytest.raises(LookupError, match="no process group named 'no such group'"):
            _torch.resolve_process_group("no such group")


def test_is_functional_collective_knows_the_functional_collectives_ops() -> None:
    assert _torch.is_functional_collective(torch.ops._c10d_functional.all_reduce)
    assert _torch.is_functional_collective(torch.ops._c10d_functional.all_gather_into_tensor)
    assert not _torch.is_functional_collective(torch.ops.aten.add)
    assert not _torch.is_functional_collective(torch.add)


def test_identity_ops_are_functional_collectives_identity_ops() -> None:
    """The names the drawing bridges as identity wrappers are ops of this torch (the
    wrapper is newer than 2.4), each an identity: its result equals its input."""
    import torch.distributed._functional_collectives  # noqa: F401 - registers the ops
    from torchgraphrec.render.oproles import IDENTITY_OPS

    found = [name for name in sorted(IDENTITY_OPS)
             if hasattr(torch.ops._c10d_functional, name)]
    assert "wait_tensor" in found
    x = torch.arange(4.0)
    for name in found:  # _wrap_tensor_autograd's result is an AsyncCollectiveTensor
        result = getattr(torch.ops._c10d_functional, name)(x.clone())
        assert torch.equal(getattr(result, "elem", result), x)


def _load_dtensor() -> None:
    """Import DTensor's module where this torch has one (``dtensor_type`` never does)."""
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            importlib.import_module(name)
            return
        except ImportError:
            continue


def test_dtensor_type_is_the_class_with_placements_and_to_local() -> None:
    _load_dtensor()
    found = _torch.dtensor_type()
    if found is None:
        pytest.skip("this torch has no DTensor")
    assert found.__name__ == "DTensor"
    assert callable(found.to_local) and hasattr(found, "placements")


def test_recording_a_model_without_dtensors_never_imports_dtensor() -> None:
    # in a fresh interpreter: this one may have loaded it for another test
    code = ("import sys, torch, torchgraphrec as tgr\n"
            "tgr.record(torch.nn.Linear(2, 2), torch.ones(1, 2))\n"
            "print(sorted(n for n in ('torch.distributed.tensor', 'torch.distributed._tensor')"
            " if n in sys.modules))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=120).stdout.strip().splitlines()[-1]
    assert shown == "[]"


def test_c10d_dispatches_torch_function_where_detected(tmp_path) -> None:
    import torch.distributed as dist

    seen: list[str] = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with one_rank_group(tmp_path):
        with Mode():
            dist.all_reduce(torch.ones(2))
    assert ("all_reduce" in seen) is _torch.C10D_DISPATCHES_TORCH_FUNCTION


def test_dtensor_local_is_the_local_shard(tmp_path) -> None:
    import torch.distributed as dist

    x = torch.ones(2)
    assert _torch.dtensor_local(x) is x
    _load_dtensor()
    if _torch.dtensor_type() is None or not dist.is_available():
        pytest.skip("this torch has no DTensor")
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:  # before torch.distributed.tensor was public
        from torch.distributed._tensor import Shard, distribute_tensor

    with one_rank_group(tmp_path):
        sharded = distribute_tensor(torch.arange(4.0), init_device_mesh("cpu", (1,)), [Shard(0)])
        local = _torch.dtensor_local(sharded)
        assert type(local) is torch.Tensor and torch.equal(local, sharded.to_local())


def test_in_sharding_propagation_keeps_dtensors_shape_finding_out_of_backward_flops(
        tmp_path) -> None:
    import torch.distributed as dist
    from torch.utils.flop_counter import FlopCounterMode

    import torchgraphrec as tgr

    _load_dtensor()
    assert _torch.in_sharding_propagation() is False
    if _torch.dtensor_type() is None or not dist.is_available():
        pytest.skip("this torch has no DTensor")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, \
        parallelize_module

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    x = torch.ones(4, 8, requires_grad=True)
    loss = model(x).sum()
    with FlopCounterMode(display=False) as plain:  # one rank: the local work is all of it
        loss.backward()
    with one_rank_group(tmp_path):
        model = parallelize_module(model, init_device_mesh("cpu", (1,)),
                                   {"0": ColwiseParallel(), "2": RowwiseParallel()})
        try:
            model(x)
        except Exception as exc:  # noqa: BLE001 - torch's own, unrecorded (2.4's strategies)
            pytest.skip(f"this torch's tensor parallel cannot run on one rank: {exc!r}")
        with tgr.Recorder(model, backward=True, flops=True) as rec:
            model(x).sum().backward()
    # DTensor learns each backward op's output shape by running it on fake tensors of the
    # global shapes, which the FLOP mode sees: counted, they doubled the total
    assert rec.graph.graph["backward_flops"] == plain.get_total_flops()


def test_queue_backward_callback_runs_at_the_end_of_the_backward_in_order() -> None:
    seen: list[str] = []
    x = torch.ones(2, requires_grad=True)

    def later() -> None:
        seen.append("later")

    def first() -> None:
        seen.append("first")
        _torch.queue_backward_callback(later)

    def hook(grad: torch.Tensor) -> None:
        _torch.queue_backward_callback(first)
        _torch.queue_backward_callback(lambda: seen.append("second"))

    x.register_hook(hook)
    (x * 2).sum().backward()
    assert seen == ["first", "second", "later"]


def test_fsdp_sharded_params_are_what_each_module_holds_once_resharded(tmp_path) -> None:
    import torch.distributed as dist

    assert _torch.fsdp_sharded_params(nn.Linear(2, 2)) == {}
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        pytest.skip("this torch has no public FSDP2 (torch.distributed.fsdp.fully_shard)")
    with one_rank_group(tmp_path):
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        fully_shard(model[0])
        fully_shard(model)  # the root unit owns model[1]'s parameters
        out = model(torch.ones(3, 4))
        kept = _torch.fsdp_sharded_params(model)
        gathered = [name for name, param in model.named_parameters()
                    if not isinstance(param, _torch.dtensor_type())]
        out.sum().backward()  # the root reshards: each module holds its sharded parameter
        held = {(id(module), name): param for module in model.modules()
                for name, param in module.named_parameters(recurse=False)}
        assert gathered == ["1.weight", "1.bias"]
        assert kept.keys() == held.keys()
        assert all(kept[key] is param for key, param in held.items())


def test_node_scoped_dispatch_modes_a_mode_pushed_in_a_backward_hook_lasts_that_node() -> None:
    seen: list[str] = []

    class Listening(_torch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    mode = Listening()
    x = torch.ones(2, requires_grad=True)
    hooked = x * 3
    after = (hooked.exp() * 2).sum()  # nodes autograd runs before and after the hooked one
    hooked.grad_fn.register_prehook(lambda grads: _torch.push_dispatch_mode(mode))
    after.backward()
    scoped = _torch.dispatch_mode_depth() == 0 and seen == ["aten.mul.Tensor"]
    while _torch.dispatch_mode_depth():  # a torch where it leaks: clean up for the others
        _torch.pop_dispatch_mode()
    assert scoped is _torch.node_scoped_dispatch_modes()
    assert torch.equal(x.grad, 3 * 2 * torch.exp(torch.full((2,), 3.0)))


def test_unbox_process_group_gives_the_group_a_dispatched_c10d_op_is_handed(tmp_path) -> None:
    import torch.distributed as dist

    handed: list[Any] = []

    class Listening(_torch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func.namespace == "c10d":
                handed.extend(args)
            return func(*args, **(kwargs or {}))

    assert _torch.unbox_process_group("0") is None
    with one_rank_group(tmp_path):
        with Listening():
            dist.all_reduce(torch.ones(2))
        groups = [found for found in map(_torch.unbox_process_group, handed) if found]
        assert groups == [dist.group.WORLD]


def test_node_scoped_dispatch_modes_is_checked_unseen_by_a_users_modes() -> None:
    seen: list[Any] = []

    class Seeing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(func)
            return func(*args, **(kwargs or {}))

    _torch.node_scoped_dispatch_modes.cache_clear()
    with Seeing(), _Seeing() as dispatched:
        _torch.node_scoped_dispatch_modes()
    assert seen == [] and dispatched.seen == []


def test_global_module_hooks_counts_every_kind_of_global_call_hook() -> None:
    before = _torch.global_module_hooks()
    handles = [torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: None),
               torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None),
               torch.nn.modules.module.register_module_full_backward_hook(
                   lambda m, gi, go: None)]
    try:
        assert _torch.global_module_hooks() == before + 3
    finally:
        for handle in handles:
            handle.remove()
    assert _torch.global_module_hooks() == before


def test_global_module_hooks_aside_hides_them_and_puts_them_back_in_order() -> None:
    seen: list[str] = []
    handles = [torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, a, name=name: seen.append(name)) for name in ("first", "second")]
    try:
        with _torch.global_module_hooks_aside():
            nn.Identity()(torch.zeros(1))
            assert seen == [] and _torch.global_module_hooks() == 0
            inside = torch.nn.modules.module.register_module_forward_pre_hook(
                lambda m, a: seen.append("inside"))
        nn.Identity()(torch.zeros(1))
        assert seen == ["first", "second", "inside"]
        inside.remove()
    finally:
        for handle in handles:
            handle.remove()
    seen.clear()
    nn.Identity()(torch.zeros(1))
    assert seen == []


def test_global_module_hooks_aside_puts_them_back_when_the_block_raises() -> None:
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)
    before = _torch.global_module_hooks()
    try:
        with pytest.raises(KeyError, match="inside"), _torch.global_module_hooks_aside():
            raise KeyError("inside")
        assert _torch.global_module_hooks() == before
    finally:
        handle.remove()


def test_storage_weak_ref_expires_with_its_storage() -> None:
    tensor = torch.zeros(3)
    ref = _torch.storage_weak_ref(tensor.untyped_storage())
    view = tensor[1:]
    del tensor
    assert not ref.expired()  # the view holds the storage
    del view
    assert ref.expired()


@pytest.mark.skipif(not _torch.GLOBAL_FORWARD_HOOKS_TAKE_KWARGS,
                    reason="this torch's global forward hooks take no keyword arguments")
def test_register_global_forward_hook_leaves_nothing_once_removed() -> None:
    from torch.nn.modules import module as torch_module

    tables = ("_global_forward_hooks", "_global_forward_hooks_with_kwargs",
              "_global_forward_hooks_always_called")
    before = {name: dict(getattr(torch_module, name, {})) for name in tables}
    seen: list[dict] = []
    handle = _torch.register_global_forward_hook(
        lambda module, args, kwargs, output: seen.append(kwargs), with_kwargs=True,
        always_call=True)
    nn.Identity()(torch.zeros(1))
    assert seen == [{}]
    handle.remove()
    assert {name: dict(getattr(torch_module, name, {})) for name in tables} == before


def test_a_recording_leaves_torchs_global_hook_tables_as_they_were() -> None:
    import torchgraphrec as tgr
    from torch.nn.modules import module as torch_module

    tables = [name for name in dir(torch_module)
              if name.startswith("_global_") and isinstance(getattr(torch_module, name), dict)]
    tgr.record(nn.Linear(2, 2), torch.zeros(1, 2))  # the process's first, calibrating
    before = {name: dict(getattr(torch_module, name)) for name in tables}
    for _ in range(3):
        tgr.record(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), torch.zeros(1, 2))
    assert {name: dict(getattr(torch_module, name)) for name in tables} == before


def test_functorch_unwrapped_gives_what_vmap_and_grad_wrap() -> None:
    x, seen = torch.ones(2, 3), []

    def look(value: torch.Tensor) -> torch.Tensor:
        seen.append(_torch.functorch_unwrapped(value))
        return value.sum()

    torch.func.vmap(look)(x)
    torch.func.grad(look)(x)
    assert [[inner is x for inner in found] for found in seen] == [[True], [True]]
    assert _torch.functorch_unwrapped(x) == []


def test_functorch_disabled_leaves_ops_on_a_held_value_unwrapped() -> None:
    wrapped = []

    def look(value: torch.Tensor) -> torch.Tensor:
        inner = _torch.functorch_unwrapped(value)[-1]
        with _torch.functorch_disabled():
            wrapped.append(_torch.functorch_unwrapped(inner.clone()))
        wrapped.append(_torch.functorch_unwrapped(inner.clone()))
        return value.sum()

    torch.func.grad(look)(torch.ones(3))
    assert wrapped[0] == [] and len(wrapped[1]) == 1


def _flags() -> tuple:
    from torch.utils import _python_dispatch

    return tuple(getattr(_python_dispatch, name)
                 for name in ("_is_in_torch_dispatch_mode", "_is_in_non_infra_torch_dispatch_mode",
                              "_is_in_any_mode_without_ignore_compile_internals")
                 if hasattr(_python_dispatch, name))


def test_dispatch_flags_are_the_flags_each_mode_keeps_its_old_values_of() -> None:
    mode = _Passing()
    with mode:
        for name, old, _ in _torch.DISPATCH_FLAGS:
            assert isinstance(getattr(importlib.import_module("torch.utils._python_dispatch"),
                                      name), bool)
            assert len(getattr(mode, old)) == 1, old
    if torch.__version__ >= "2.5":  # 2.4 keeps one flag, each mode one old value of it
        assert _torch.DISPATCH_FLAGS


def test_restack_dispatch_flags_leaves_them_as_if_the_mode_left_had_never_entered() -> None:
    before = _flags()
    first, user = _Passing(), _Passing()
    first.__enter__()
    user.__enter__()
    above = [_torch.pop_dispatch_mode()]
    first.__exit__(None, None, None)  # out of order: torch clears its flags
    _torch.restack_dispatch_flags(above)
    _torch.push_dispatch_mode(above[0])
    try:
        assert torch.utils._python_dispatch.is_in_torch_dispatch_mode()
    finally:
        user.__exit__(None, None, None)
    assert _torch.dispatch_modes() == [] and _flags() == before


def test_sets_stance_from_torch_2_6_on() -> None:
    release = tuple(int(part) for part in torch.__version__.split(".")[:2])
    assert _torch.SETS_STANCE == (release >= (2, 6))


@pytest.mark.skipif(not _torch.SETS_STANCE, reason="torch before 2.6 takes no stance (and "
                    "its dynamo leaves is_in_torch_dispatch_mode() true for the process)")
def test_compiled_code_eager_compiles_nothing_inside_and_restores_after() -> None:
    compiled: list = []

    @torch.compile(backend=lambda graph, inputs: compiled.append(graph) or graph.forward)
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    try:
        with _torch.compiled_code_eager():
            assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))
        assert compiled == []
        double(torch.ones(2))
        assert len(compiled) == 1
    finally:
        torch._dynamo.reset()
