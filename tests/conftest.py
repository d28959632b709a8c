"""Shared fixtures: the zoo on sys.path, golden-file updating, and a quiet transformers."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from torchgraphrec import _torch

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite the golden files under tests/golden instead of comparing")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def _pinned_torch() -> str:
    for line in (Path(__file__).parents[1] / "constraints.txt").read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==")[1].strip()
    return ""


def _major(package: str) -> int:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version(package).split(".")[0])
    except PackageNotFoundError:
        return 0


def _as_subclass_under_dispatch_mode() -> bool:
    """Whether a subclass's own torch function can call ``as_subclass`` under a dispatch mode
    (which FlopCounterMode is)."""
    class Subclass(torch.Tensor):
        pass

    class Passing(_torch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    value = torch.ones(1).as_subclass(Subclass)
    try:
        with Passing(), torch._C.DisableTorchFunctionSubclass():
            value.as_subclass(torch.Tensor)
    except RuntimeError:
        return False
    return True


def _has(module: str, name: str) -> bool:
    """Whether ``module`` (importable) has the public ``name``."""
    import importlib

    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def _copy_in_given_its_output() -> bool:
    """Whether FSDP2's ``torch.ops.fsdp.all_gather_copy_in`` is handed the tensor it writes
    (``all_gather_output``: the schema of torch 2.8 and later; before, it makes it)."""
    if not _has("torch.distributed.fsdp", "fully_shard"):  # importing it registers the op
        return False
    op = getattr(getattr(torch.ops, "fsdp", None), "all_gather_copy_in", None)
    schema = getattr(getattr(op, "default", None), "_schema", None)
    return schema is not None and any(a.name == "all_gather_output" for a in schema.arguments)


def _grouped_query_attention() -> bool:
    """Whether ``scaled_dot_product_attention`` takes ``enable_gqa`` (torch 2.5 and later)."""
    query, kv = torch.zeros(1, 2, 1, 2), torch.zeros(1, 1, 1, 2)
    try:
        torch.nn.functional.scaled_dot_product_attention(query, kv, kv, enable_gqa=True)
    except TypeError:
        return False
    return True


#: What ``@pytest.mark.needs(name)`` asks of the torch the suite runs on: whether it has it,
#: and the reason the test is skipped where not.
NEEDS = {
    "saved_bytes": (_torch.SAVED_TENSOR_HOOKS_READABLE,
                    "counting saved bytes needs torch._C._autograd."
                    "_top_saved_tensors_default_hooks, which this torch lacks"),
    "global_hook_kwargs": (_torch.GLOBAL_FORWARD_HOOKS_TAKE_KWARGS,
                           "this torch's global forward hooks take no keyword arguments "
                           "(register_module_forward_hook(with_kwargs=...)), so the recorder "
                           "hooks each module"),
    "as_subclass_under_dispatch_mode": (_as_subclass_under_dispatch_mode(),
                                        "this torch cannot run as_subclass on a subclass's "
                                        "tensor under a dispatch mode (FlopCounterMode fails "
                                        "there too)"),
    "transformers_5": (_major("transformers") >= 5,
                       "written against transformers 5's modeling code, which needs a newer "
                       "torch than this one"),
    # tensor parallel first: importing it loads DTensor, which dtensor_type never does
    "dtensor": (_has("torch.distributed.tensor.parallel", "parallelize_module")
                and _torch.dtensor_type() is not None,
                "this torch has no DTensor with tensor parallel's parallelize_module"),
    "public_dtensor": (_has("torch.distributed.tensor", "distribute_tensor"),
                       "this torch's DTensor is the prototype in torch.distributed._tensor, "
                       "whose tensor parallel hands back other placements"),
    "fully_shard": (_has("torch.distributed.fsdp", "fully_shard"),
                    "this torch has no public FSDP2 (torch.distributed.fsdp.fully_shard, "
                    "torch 2.6 and later)"),
    "grouped_query_attention": (_grouped_query_attention(),
                                "this torch's scaled_dot_product_attention takes no "
                                "enable_gqa (grouped-query attention)"),
    "copy_in_given_its_output": (_copy_in_given_its_output(),
                                 "this torch's FSDP2 all_gather_copy_in makes its output "
                                 "(an older schema than the test calls)"),
    # FSDP2's lazy set-up (the root's first forward) viewed every unit's shards before 2.8
    # (fsdp/_fully_shard/_fsdp_param.py reset_sharded_param): what a nested unit's
    # copy-in reads was made in the root's call, so its unshard is drawn op by op there
    "unit_views_its_shards": (tuple(int(part) for part in
                                    torch.__version__.split("+")[0].split(".")[:2]) >= (2, 8),
                              "this torch's FSDP2 views every unit's shards in the root's "
                              "first forward, so a nested unit's unshard is not one box"),
    "flight_recorder": (_has("torch._C._distributed_c10d", "_dump_fr_trace"),
                        "this torch's gloo process groups keep no flight recorder "
                        "(torch._C._distributed_c10d._dump_fr_trace)"),
    "comm_debug_mode": (_has("torch.distributed.tensor.debug", "CommDebugMode"),
                        "this torch has no public CommDebugMode "
                        "(torch.distributed.tensor.debug)"),
    "collectives_dispatched": (_torch.C10D_DISPATCHES_TORCH_FUNCTION,
                               "this torch's torch.distributed calls its backend without "
                               "torch-function dispatch, so no mode sees its collectives"),
    "pinned_torch": (torch.__version__.split("+")[0] == _pinned_torch(),
                     "the picture was drawn with constraints.txt's torch, and another torch "
                     "records other ops"),
}

#: Doctests and generated cases (which take no marks) and what they need.
ITEM_NEEDS = {
    "torchgraphrec.recording.Recording.costs": "saved_bytes",
    "torchgraphrec.recording.Recording.summary": "saved_bytes",
    "test_notebook_runs[costs]": "saved_bytes",
    "test_what_runs_beneath_an_op_is_counted_as_flop_counter_mode_counts_it[a plain subclass]":
        "as_subclass_under_dispatch_mode",
    "test_layer_parents_follow_the_module_tree[t5]": "transformers_5",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        needed = [mark.args[0] for mark in item.iter_markers("needs")]
        needed += [ITEM_NEEDS[item.name]] if item.name in ITEM_NEEDS else []
        for name in needed:
            have, why = NEEDS[name]
            if not have:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's chromium through playwright; the test is skipped, with the reason, where
    chromium or playwright is missing."""
    from report.browser import launch, missing

    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    with launch() as running:
        yield running
