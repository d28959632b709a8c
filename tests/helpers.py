"""Helpers for tests: plain reference runs and snapshots of what a recorder must not change."""

from __future__ import annotations

import contextlib
import copy
import datetime
import faulthandler
import gc
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import networkx as nx
import torch
from torch.nn.modules import module as torch_module

from models import Case, make
from torchgraphrec._torch import SAVED_TENSOR_HOOKS_READABLE, top_saved_tensor_hooks
from torchgraphrec.capture.structures import flatten_tensors
from torchgraphrec.recording import backward_loss

__all__ = ["run_plain", "hook_state", "nodes_of", "assert_same_tensors", "one_rank_group",
           "drive_capture_clock"]


def run_plain(case: Case, backward: bool = False) -> tuple[Any, dict[str, torch.Tensor]]:
    """Run a deep copy of ``case`` without any recorder: its output and parameter grads."""
    model = copy.deepcopy(case.model)
    output = model(*case.args, **case.kwargs)
    grads = {}
    if backward:
        backward_loss(output).backward()
        grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    return output, grads


def assert_same_tensors(left: Any, right: Any) -> None:
    """The two nested values hold bit-identical tensors in the same places."""
    left_tensors, right_tensors = flatten_tensors(left), flatten_tensors(right)
    assert len(left_tensors) == len(right_tensors) > 0
    for a, b in zip(left_tensors, right_tensors):
        assert torch.equal(a, b)


def _compiler_stance() -> Any:
    """torch.compile's stance (``None`` before dynamo is imported, or before torch 2.6)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    stance = getattr(eval_frame, "_stance", None)
    return None if stance is None else stance.stance


def hook_state(model: torch.nn.Module) -> dict[str, Any]:
    """Everything a recorder could leave behind on ``model`` or in torch's global state."""
    per_module = {}
    for name, module in model.named_modules():
        per_module[name] = (
            len(module._forward_hooks), len(module._forward_pre_hooks),
            len(module._backward_hooks), len(module._backward_pre_hooks),
            len(module._forward_hooks_with_kwargs), len(module._forward_hooks_always_called),
            module.training,
        )
    return {
        "modules": per_module,
        "global": (len(torch_module._global_forward_hooks),
                   len(torch_module._global_forward_pre_hooks),
                   len(torch_module._global_backward_hooks),
                   len(torch_module._global_forward_hooks_always_called),
                   len(getattr(torch_module, "_global_forward_hooks_with_kwargs", ())),
                   len(torch_module._global_module_registration_hooks),
                   len(torch_module._global_parameter_registration_hooks),
                   len(torch_module._global_buffer_registration_hooks)),
        "grad_enabled": torch.is_grad_enabled(),
        "mode_stacks": (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()),
        "gc_enabled": gc.isenabled(),
        "recursion_limit": sys.getrecursionlimit(),
        "compiler_stance": _compiler_stance(),
        "saved_tensor_hooks": top_saved_tensor_hooks() if SAVED_TENSOR_HOOKS_READABLE else None,
        "params": [(n, p.requires_grad, p.device) for n, p in model.named_parameters()],
    }


class Tripled(torch.autograd.Function):
    """A custom Function that saves a tensor of its own making, which autograd packs only
    as ``apply`` returns (no op runs then), and returns ``x * x``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x * 3)
        return x * x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * ctx.saved_tensors[0]


class OpNames(torch.overrides.TorchFunctionMode):
    """The names of the torch-level calls a plain run makes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def op_names(graph: nx.DiGraph) -> list[str]:
    """The names of a recording's op nodes, in the order they ran."""
    ops = sorted(nodes_of(graph, "op").values(), key=lambda attrs: attrs["seq"])
    return [attrs["name"] for attrs in ops]


def nodes_of(graph: nx.DiGraph, kind: str) -> dict[str, dict]:
    """The nodes of one kind, with their attributes."""
    return {node: attrs for node, attrs in graph.nodes(data=True) if attrs["kind"] == kind}


def fresh(name: str) -> Case:
    """A zoo case built from seed 0 (same weights and inputs every time)."""
    return make(name, seed=0)


#: How long a block with a one-rank process group may run, its teardown included, before
#: the test process is killed with every thread's traceback (a hang fails, never stalls).
ONE_RANK_DEADLINE_S = 240


@contextlib.contextmanager
def one_rank_group(folder: Path) -> Iterator[None]:
    """A gloo process group of one rank in this process, for as long as the block runs.

    Its teardown first waits for the group's work in flight: on torch 2.4, destroying a gloo
    group while a worker thread frees the tensors of async work nobody waited for (DTensor's
    broadcasts) deadlocks, the worker wanting the GIL that the destroying thread holds.
    """
    import torch.distributed as dist

    faulthandler.dump_traceback_later(ONE_RANK_DEADLINE_S, exit=True)
    try:
        dist.init_process_group("gloo", store=dist.FileStore(str(folder / "store"), 1),
                                rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
        try:
            yield
        finally:
            dist.barrier()  # gloo's barrier waits for every work before it
            time.sleep(0.05)  # the GIL let go, for the workers to free what that work held
            dist.destroy_process_group()
    finally:
        faulthandler.cancel_dump_traceback_later()


def drive_capture_clock(monkeypatch: Any, now: Any, costs: Any) -> None:
    """Make every clock read of the capture's hooks, op handler and clock call ``now``, and
    its calibrated dispatch costs ``costs`` (a ``calibrate.DispatchCosts``)."""
    for module in ("calls", "ops", "clock"):  # the capture modules that read the clock
        monkeypatch.setattr(f"torchgraphrec.capture.{module}._now", now)
    monkeypatch.setattr("torchgraphrec.capture.capture.dispatch_costs", lambda: costs)
