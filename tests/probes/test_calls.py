"""Which call a record belongs to: raising pre-hooks, checkpoints, calls without gradients,
forwards without step(), and steps after the block."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import torchgraphrec as tgr
from helpers import hook_state
from models import ReusedModule
from torchgraphrec import select as S


class _Fast(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class _Fallback(nn.Module):
    """Takes a slow path where the fast one's validation pre-hook refuses the input."""

    def __init__(self) -> None:
        super().__init__()
        self.fast, self.slow = _Fast(), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return self.fast(x)
        except ValueError:
            return self.slow(x)


def _only_small(module: nn.Module, args: tuple) -> None:
    if args[0].shape[0] > 4:
        raise ValueError("batch too big for the fast path")


def test_a_users_pre_hook_that_raises_in_a_caught_call_breaks_nothing() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_Fallback(), nn.Linear(4, 1))
    model[0].fast.register_forward_pre_hook(_only_small)  # before the recorder's
    x = torch.randn(8, 4)
    outputs: dict[str, torch.Tensor] = {}
    handles = [model[index].register_forward_hook(
        lambda m, a, out, name=str(index): outputs.setdefault(name, out.detach().clone()))
        for index in (0, 1)]
    expected = model(x)
    for handle in handles:
        handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tgr.Recorder(model, probes=[tgr.probe("output", keep="full")]) as rec:
            output = model(x)
            assert rec._engine._open == []
    assert torch.equal(output, expected)
    for name in ("0", "1"):
        (kept,) = rec[name, "output"]
        assert torch.equal(kept, outputs[name])
    assert len(rec["0.slow", "output"]) == 1
    with pytest.raises(KeyError, match=r"nothing was recorded for .*0\.fast"):
        rec["0.fast", "output"]  # its call never ran its forward


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


class _Checkpointed(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.block, self.head, self.reentrant = _Block(), nn.Linear(4, 1), reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=self.reentrant))


def _grad_of_block_a(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """dL/d(block.a's output) by a plain forward hook and tensor hook, on a copy."""
    model, found = copy.deepcopy(model), []

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if output.requires_grad:  # in a reentrant checkpoint: in its recomputation
            output.register_hook(lambda grad: found.append(grad.clone()))

    model.block.a.register_forward_hook(hook)
    model(x).sum().backward()
    (grad,) = found
    return grad


def test_a_reentrant_checkpoint_warns_that_its_gradients_are_not_recorded() -> None:
    torch.manual_seed(0)
    model, x = _Checkpointed(reentrant=True), torch.randn(2, 4, requires_grad=True)
    probes = [tgr.probe("grad_output", where=S.name("block.a"), keep="full")]
    with pytest.warns(UserWarning, match=r"reentrant checkpoint .*use_reentrant=False") as caught:
        with tgr.Recorder(model, probes=probes) as rec:
            model(x).sum().backward()
            model(x).sum().backward()
    # once, at the user's line (torch 2.4's checkpoint adds warnings of its own)
    ours = [w for w in caught if str(w.message).startswith("torchgraphrec")]
    assert len(ours) == 1 and ours[0].filename == __file__
    assert rec["block.a", "grad_output"] == [None, None]  # each call in its place, unseen


@pytest.mark.parametrize("evaluated_first", [False, True])
def test_a_non_reentrant_checkpoint_records_gradients_without_a_warning(
        evaluated_first: bool) -> None:
    # after an evaluation under no_grad, the module it saw without gradients was taken,
    # for the rest of the block, for one inside a reentrant checkpoint: its recomputation
    # in the backward warned
    torch.manual_seed(0)
    model, x = _Checkpointed(reentrant=False), torch.randn(2, 4, requires_grad=True)
    expected = _grad_of_block_a(model, x)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="torchgraphrec")
        with tgr.Recorder(model, probes=[tgr.probe("grad_output", where=S.name("block.a"),
                                                   keep="full")]) as rec:
            if evaluated_first:
                with torch.no_grad():
                    model(x)
            model(x).sum().backward()
    *evaluation, recorded = rec["block.a", "grad_output"]
    assert evaluation == ([None] if evaluated_first else [])
    assert torch.equal(recorded, expected)


class _Siamese(nn.Module):
    """A stop-gradient branch (SimSiam, BYOL): the encoder's first call gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 4)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            target = self.enc(x2)
        return ((self.enc(x1) - target) ** 2).sum()


def test_grad_output_entries_line_up_with_calls_when_a_call_has_no_gradient() -> None:
    torch.manual_seed(0)
    model, x1, x2 = _Siamese(), torch.randn(2, 4), torch.randn(2, 4)
    online = model.enc(x1)
    (expected,) = torch.autograd.grad(((online - model.enc(x2).detach()) ** 2).sum(), online)
    probes = [tgr.probe("output", keep="full"), tgr.probe("grad_output", keep="full")]
    with tgr.Recorder(model, probes=probes) as rec:
        model(x1, x2).backward()
    outputs, grads = rec["enc", "output"], rec["enc", "grad_output"]
    assert len(grads) == len(outputs) == 2
    assert grads[0] is None and torch.equal(grads[1], expected)


def _cosines_of_consecutive_forwards(model: nn.Module, batches: list, calls: int) -> list:
    """The float64 cosine of each call of ``model.shared`` with the same call of the
    previous forward, by a plain forward hook on a copy (``None`` in the first forward)."""
    model, outputs = copy.deepcopy(model), []
    model.shared.register_forward_hook(
        lambda m, a, out: outputs.append(out.detach().double().flatten()))
    with torch.no_grad():
        for x in batches:
            model(x)
    return [None if index < calls else float(torch.nn.functional.cosine_similarity(
        outputs[index - calls], output, dim=0)) for index, output in enumerate(outputs)]


def test_cosine_without_step_compares_forwards_and_remembers_one_copy_per_call() -> None:
    torch.manual_seed(0)
    model = ReusedModule().eval()  # shared: called 3 times a forward
    batches = [torch.randn(2, 5) for _ in range(6)]
    expected = _cosines_of_consecutive_forwards(model, batches, calls=3)
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("shared"),
                                               keep="cosine")], graph="first") as rec:
        with torch.no_grad():
            for x in batches:
                model(x)  # no rec.step(): an evaluation loop
    table = rec.frame()
    assert list(table.call_index) == list(range(18))
    assert table.value[:3].isna().all()
    assert table.value[3:].tolist() == pytest.approx(expected[3:], rel=1e-5)
    assert len(rec.store.memory) == 3


def test_step_after_the_block_is_refused_and_records_no_parameter_update() -> None:
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    before = hook_state(model)
    with tgr.Recorder(model, probes=[tgr.probe("param_update", keep="l2")]) as rec:
        model(torch.randn(1, 2)).sum().backward()
        optimizer.step()
        rec.step()
    recorded = rec.frame()
    model(torch.randn(1, 2)).sum().backward()
    optimizer.step()
    with pytest.raises(RuntimeError, match=r"step\(\) after the Recorder's with-block"):
        rec.step()
    assert len(recorded) == 2 and rec.frame().equals(recorded)
    assert hook_state(model) == before


def _doubled(output: torch.Tensor) -> torch.Tensor:
    return output * 2.0 + 1.0


@pytest.mark.parametrize("reentrant", [False, True])
def test_an_edit_inside_a_checkpoint_holds_in_its_recomputation(reentrant: bool) -> None:
    # the edit was skipped as the backward recomputed the call: outputs right, gradients
    # of activations the forward never had
    torch.manual_seed(0)
    model, x = _Checkpointed(reentrant), torch.randn(3, 4, requires_grad=True)
    reference = copy.deepcopy(model)
    reference.block.a.register_forward_hook(lambda module, args, output: _doubled(output))
    reference(x).sum().backward()
    probe = tgr.probe("output", where=S.name("block.a"), keep="l2", edit=_doubled)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reentrant checkpoint's own warnings
        with tgr.Recorder(model, probes=[probe]):
            model(x).sum().backward()
    for (name, param), expected in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(param.grad, expected.grad), name


def test_an_edit_chosen_by_when_inside_a_checkpoint_is_refused_after_the_block() -> None:
    torch.manual_seed(0)
    model, x = _Checkpointed(reentrant=False), torch.randn(3, 4)
    probe = tgr.probe("output", where=S.name("block.a"), keep="l2", edit=_doubled,
                      when=lambda context: context.call_index == 0)
    with pytest.raises(tgr.CaptureError, match="checkpoint recomputed a call of 'block.a'"):
        with tgr.Recorder(model, probes=[probe]):
            model(x).sum().backward()
    assert hook_state(model) == hook_state(_Checkpointed(reentrant=False))
