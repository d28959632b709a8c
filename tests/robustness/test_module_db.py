"""Every configuration of PyTorch's own module test database, recorded with grad and under no_grad."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.modules import module as torch_module
from torch.nn.modules.conv import _ConvNd
from torch.utils.flop_counter import FlopCounterMode
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import torchgraphrec as tgr
from torchgraphrec._torch import SAVED_TENSOR_HOOKS_READABLE, top_saved_tensor_hooks
from torchgraphrec.recording import backward_loss

pytest.importorskip("expecttest")  # torch.testing._internal needs it
from torch.testing._internal.common_modules import module_db  # noqa: E402


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _same(left: Any, right: Any) -> bool:
    """Bit-identical tensors in the same places (NaN where NaN, nested tensors padded)."""
    ours, theirs = _tensors(left), _tensors(right)
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs):
        if a.is_nested:
            a, b = a.to_padded_tensor(0.0), b.to_padded_tensor(0.0)
        if a.shape != b.shape or not torch.equal(a.isnan(), b.isnan()) or \
                not torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)):
            return False
    return True


def _nothing_left(model: torch.nn.Module) -> bool:
    return not (torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks
                or any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())
                or torch._C._len_torch_function_stack() or _get_current_dispatch_mode_stack()
                or (SAVED_TENSOR_HOOKS_READABLE and top_saved_tensor_hooks() is not None))


def _check(info: Any, sample: Any, training: bool, grad: bool) -> None:
    torch.manual_seed(0)
    model = info.module_cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
    model.train(training)
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    with torch.set_grad_enabled(grad):
        torch.manual_seed(1)
        try:
            expected = copy.deepcopy(model)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception as exc:  # a sample the module itself refuses: refused the same way
            with pytest.raises(type(exc)):
                tgr.record(model, copy.deepcopy(args), copy.deepcopy(kwargs), memory=grad)
            assert _nothing_left(model)
            return
        torch.manual_seed(1)
        # saved bytes counted in grad mode: the saved-tensor hooks on top of everything else
        recording = tgr.record(model, copy.deepcopy(args), copy.deepcopy(kwargs), memory=grad)
    where = f"{info.name} ({sample.desc or 'default'}, training={training}, grad={grad})"
    assert _same(expected, recording.output), where
    assert _nothing_left(model), where
    tgr.validate(recording.graph)
    kinds = {attrs["kind"] for _, attrs in recording.graph.nodes(data=True)}
    if any(True for _ in model.parameters()):
        assert {"param", "op"} <= kinds, where  # frozen or not, under no_grad or not


def _configurations(info: Any) -> Iterator[tuple[Any, bool]]:
    """Each sample input of ``info``'s module that runs a forward, in training and in eval
    mode (warnings silenced while they are made and run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for training in (True, False):
            samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                              requires_grad=False, training=training)
            for sample in samples:
                if sample.forward_input is not None:
                    yield sample, training


@pytest.mark.parametrize("info", module_db, ids=lambda info: info.name)
def test_every_configuration_records_as_it_runs(info: Any) -> None:
    for sample, training in _configurations(info):
        for grad in (True, False):
            _check(info, sample, training, grad)


def _flops_agree(info: Any, sample: Any, training: bool) -> None:
    torch.manual_seed(0)
    model = info.module_cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
    model.train(training)
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    # kernels PyTorch's counter counts on CPU: SDPA's math and the LSTM's step-by-step path
    # (oneDNN's LSTM kernel, which it counts as 0: tests/capture/test_costs.py)
    with sdpa_kernel(SDPBackend.MATH), torch.backends.mkldnn.flags(enabled=False):
        torch.manual_seed(1)
        try:
            output = copy.deepcopy(model)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception:  # a sample the module refuses: the test above checks it is refused
            return
        backward = any(t.is_floating_point() and t.requires_grad for t in _tensors(output))
        # PyTorch's formula counts a grouped convolution's weight gradient `groups` times;
        # the recorder's counts each group's (tests/capture/test_flop_mode.py): the
        # forwards are compared here
        backward = backward and not (isinstance(model, _ConvNd) and model.groups > 1)
        with FlopCounterMode(display=False) as counter:
            torch.manual_seed(1)
            output = copy.deepcopy(model)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            if backward:
                backward_loss(output).backward()
        torch.manual_seed(1)
        graph = tgr.record(model, copy.deepcopy(args), copy.deepcopy(kwargs), flops=True,
                           backward=backward).graph
    where = f"{info.name} ({sample.desc or 'default'}, training={training})"
    recorded = graph.graph["flops"] + graph.graph.get("backward_flops", 0)
    assert recorded == counter.get_total_flops(), where


@pytest.mark.parametrize("info", module_db, ids=lambda info: info.name)
def test_every_configuration_counts_the_flops_pytorch_counts(info: Any) -> None:
    for sample, training in _configurations(info):
        if training:  # eval mode runs the same products (and twice the test's time)
            _flops_agree(info, sample, training)
