"""Probes on the recorder's hooks: exact gradients, per-call records, memory, no side effects."""

from __future__ import annotations

import copy
import gc
import math
import warnings
import weakref

from typing import Optional

import pandas
import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import torchgraphrec as tgr
from helpers import fresh, hook_state
from models import ReusedModule, StructuredOutputs
from torchgraphrec import select as S
from torchgraphrec.recording import backward_loss


def _mlp(inplace: bool) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=inplace), nn.Linear(8, 3))


@pytest.mark.parametrize("inplace", [False, True])
def test_grad_output_equals_autograd_grad(inplace: bool) -> None:
    x = torch.randn(5, 4)
    reference = _mlp(inplace=False)
    captured = {}
    reference[0].register_forward_hook(lambda m, a, out: captured.setdefault("out", out))
    loss = backward_loss(reference(x))
    (expected,) = torch.autograd.grad(loss, captured["out"])

    model = _mlp(inplace)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tgr.Recorder(model, probes=[tgr.probe("grad_output", where=S.name("0"),
                                                   keep="full")]) as rec:
            backward_loss(model(x)).backward()
    (recorded,) = rec["0", "grad_output"]
    assert torch.equal(recorded, expected)


class _Twice(nn.Module):
    """One layer called twice, its first call's output weighing 100 times in the loss: the
    two calls' output gradients differ, and arrive in the backward last call first."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self.lin(x)
        return first.sum() * 100 + self.lin(first * 10).sum()


def test_grad_outputs_of_a_reused_layer_are_listed_in_call_order(tmp_path) -> None:
    torch.manual_seed(0)
    model, x = _Twice(), torch.randn(2, 3)
    outputs = []
    handle = model.lin.register_forward_hook(lambda m, a, out: outputs.append(out))
    expected = torch.autograd.grad(model(x), outputs)
    handle.remove()
    with tgr.Recorder(model, probes=[tgr.probe("grad_output", where=S.name("lin"),
                                               keep="full")]) as rec:
        model(x).backward()
    recorded = rec["lin", "grad_output"]
    assert len(recorded) == 2 and not torch.equal(expected[0], expected[1])
    assert all(torch.equal(got, want) for got, want in zip(recorded, expected))
    loaded = tgr.load(rec.save(tmp_path / "run"))["lin", "grad_output"]
    assert all(torch.equal(got, want) for got, want in zip(loaded, expected))


def test_grad_output_of_nested_outputs_is_keyed_by_path() -> None:
    torch.manual_seed(0)
    model, x = StructuredOutputs(), torch.randn(2, 4)
    with tgr.Recorder(model, probes=[tgr.probe("grad_output", where=S.name("^$"),
                                               keep="full")]) as rec:
        output = model(x)
        paths = {"[0][0]": output[0][0], "[1]['hidden']": output[1]["hidden"],
                 "[1]['pair'][0]": output[1]["pair"][0], "[2].logits": output[2].logits,
                 "[2].extra[1]['deep']": output[2].extra[1]["deep"]}
        grads = torch.autograd.grad(backward_loss(output), list(paths.values()))
    (entry,) = rec["", "grad_output"]
    assert set(entry) == set(paths)
    for path, grad in zip(paths, grads):
        assert torch.equal(entry[path], grad)


def test_reused_module_outputs_are_kept_per_call() -> None:
    torch.manual_seed(0)
    model, x = ReusedModule(), torch.randn(2, 5)
    real = []
    model.shared.register_forward_hook(lambda m, a, out: real.append(out.detach().clone()))
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("shared"), keep="full")]) as rec:
        model(x)
    kept = rec["shared", "output"]
    assert len(kept) == 3
    for recorded, expected in zip(kept, real):
        assert torch.equal(recorded, expected)
    table = rec.frame()
    assert table.empty  # full tensors are not scalar rows


def test_statistics_are_rows_of_a_tidy_frame() -> None:
    model = _mlp(False)
    probes = [tgr.probe("output", where=S.type(nn.Linear), keep=["rms", "dead"]),
              tgr.probe("param_grad", where=S.type(nn.Linear), keep="l2")]
    with tgr.Recorder(model, probes=probes) as rec:
        for epoch in range(2):
            for _ in range(3):
                backward_loss(model(torch.randn(4, 4))).backward()
                rec.step()
            rec.epoch()
    table = rec.frame()
    assert list(table.columns) == ["epoch", "step", "module", "type", "call_index", "site",
                                   "path", "stat", "value"]
    outputs = table[table.site == "output"]
    assert len(outputs) == 2 * 3 * 2 * 2  # epochs x steps x Linear calls x stats
    assert set(outputs.stat) == {"rms", "dead"} and set(outputs.type) == {"Linear"}
    grads = table[table.site == "param_grad"]
    assert set(grads.path) == {"weight", "bias"} and (grads.value > 0).all()
    by_epoch = rec.frame(by="epoch", agg=["mean", "min", "max"])
    assert len(by_epoch) == 2 * (2 * 2 + 2 * 2)  # epochs x (output rows + param_grad rows)
    assert (by_epoch["min"] <= by_epoch["mean"]).all()


def test_full_tensors_are_detached_copies() -> None:
    model = _mlp(False)
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("0"), keep="full")]) as rec:
        output = model(torch.randn(2, 4))
        hidden = weakref.ref(output)
    (kept,) = rec["0", "output"]
    assert not kept.requires_grad and kept.grad_fn is None
    del output
    gc.collect()
    assert hidden() is None


def test_memory_limit_stops_keeping_tensors_with_a_warning() -> None:
    model = _mlp(False)
    probes = [tgr.probe("output", where=S.name("0"), keep=["full", "rms"])]
    with pytest.warns(UserWarning, match="reached their memory limit of 200 bytes") as caught:
        with tgr.Recorder(model, probes=probes, memory_limit=200) as rec:
            for _ in range(5):
                model(torch.randn(2, 4))  # 2 x 8 float32 = 64 bytes of output per call
    assert {w.filename for w in caught} == {__file__}  # the forward's line, not a hook's
    kept = rec["0", "output"]
    assert [sorted(entry) for entry in kept] == [["full", "rms"]] * 3 + [["rms"]] * 2
    assert rec.store.bytes == 3 * 64
    assert len(rec.frame()) == 5  # every rms row is still there


@pytest.mark.parametrize("reduce, check", [
    # rms is computed as a norm over sqrt(n): equal to sqrt(mean(x²)) up to rounding
    ("last", lambda kept, values: torch.allclose(kept, values[-1], rtol=1e-6, atol=0)),
    ("sum", lambda kept, values: torch.allclose(kept, sum(values))),
    ("running", lambda kept, values: torch.allclose(kept["mean"], torch.stack(values).double().mean())
     and kept["count"] == 4),
    (lambda a, b: torch.maximum(a, b),
     lambda kept, values: torch.allclose(kept, max(values), rtol=1e-6, atol=0)),
])
def test_reductions_over_calls(reduce, check) -> None:
    model = _mlp(False)
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("2"), keep="rms",
                                               reduce=reduce),
                                     tgr.probe("output", where=S.name("0"), keep="rms")]) as rec:
        values = [model(torch.randn(3, 4)).detach().pow(2).mean().sqrt() for _ in range(4)]
    assert check(rec["2", "output"], values)
    assert len(rec["0", "output"]) == 4


def test_when_conditions_on_step_and_training() -> None:
    model = _mlp(False)
    probes = [tgr.probe("output", where=S.name("0"), when=lambda c: c.step % 2 == 0 and c.training)]
    with tgr.Recorder(model, probes=probes) as rec:
        for _ in range(4):
            model(torch.randn(2, 4))
            rec.step()
        model.eval()
        model(torch.randn(2, 4))
    assert sorted(rec.frame().step) == [0, 2]


def test_input_param_and_update_sites() -> None:
    model = _mlp(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    probes = [tgr.probe(site, where=S.name("2"), keep="l2")
              for site in ("input", "grad_input", "param", "param_update")]
    with tgr.Recorder(model, probes=probes) as rec:
        for _ in range(2):
            optimizer.zero_grad()
            backward_loss(model(torch.randn(2, 4))).backward()
            optimizer.step()
            rec.step()
    table = rec.frame()
    assert set(table.site) == {"input", "grad_input", "param", "param_update"}
    assert set(table[table.site == "input"].path) == {"args[0]"}
    assert set(table[table.site == "param_update"].path) == {"weight", "bias"}
    updates = table[(table.site == "param_update") & (table.path == "bias")]
    assert (updates.value > 0).all() and len(updates) == 2


def test_edit_replaces_the_output_after_recording_it() -> None:
    model = _mlp(False)
    x = torch.randn(2, 4)
    plain = model(x)
    probes = [tgr.probe("output", where=S.name("2"), keep="full", edit=lambda out: out * 0)]
    with tgr.Recorder(model, probes=probes) as rec:
        edited = model(x)
    assert torch.equal(rec["2", "output"][0], plain.detach())
    assert torch.equal(edited, torch.zeros_like(plain))


@pytest.mark.parametrize("name", ["resnet_like", "gpt2", "inplace"])
def test_probes_change_no_output_or_gradient_and_leave_nothing(name: str) -> None:
    case = fresh(name)
    reference = copy.deepcopy(case.model)
    expected = backward_loss(reference(*case.args, **case.kwargs))
    expected.backward()
    model = case.model
    before = hook_state(model)
    probes = [tgr.probe(site, where=S.leaves(), keep=["rms", "cosine"])
              for site in ("output", "grad_output", "param_grad")]
    with tgr.Recorder(model, probes=probes) as rec:
        loss = backward_loss(model(*case.args, **case.kwargs))
        loss.backward()
    assert torch.equal(loss, expected)
    for (param_name, param), (_, ref) in zip(model.named_parameters(), reference.named_parameters()):
        if ref.grad is not None:
            assert torch.equal(param.grad, ref.grad), param_name
    assert hook_state(model) == before
    assert len(rec.frame()) > 0


def test_a_failing_statistic_is_reported_after_the_block() -> None:
    def broken(tensor: torch.Tensor) -> torch.Tensor:
        raise ArithmeticError("bad statistic")

    model = _mlp(False)
    before = hook_state(model)
    with pytest.raises(tgr.CaptureError, match="bad statistic"):
        with tgr.Recorder(model, probes=[tgr.probe("grad_output", keep=broken)]):
            output = model(torch.randn(2, 4))
            backward_loss(output).backward()  # the user's backward still completes
    assert hook_state(model) == before


@pytest.mark.parametrize("selector, expected", [
    (S.type(nn.Linear), ["0", "2"]),
    (S.children(indices=[1]), ["1"]),
    (S.modules(indices=[0, 3]), ["", "2"]),
    (S.label("1-2", "1-3"), ["1", "2"]),
    (S.depth(0), [""]),
    (S.leaves() & ~S.type(nn.ReLU), ["0", "2"]),
    (S.name(r"^[02]$") | S.name("1"), ["0", "1", "2"]),
])
def test_selectors(selector, expected) -> None:
    assert [name for name, _ in selector.resolve(_mlp(False))] == expected


@pytest.mark.parametrize("selector, error, match", [
    (S.name("20"), ValueError, r"unknown module name '20'; did you mean '2', '0'\?"),
    (S.label("2-1"), ValueError, "unknown label '2-1'"),
    (S.children(indices=[7]), ValueError, "children index 7 is out of range"),
])
def test_unknown_names_are_refused_when_entered(selector, error, match) -> None:
    model = _mlp(False)
    before = hook_state(model)
    with pytest.raises(error, match=match):
        with tgr.Recorder(model, probes=[tgr.probe("output", where=selector)]):
            pass
    assert hook_state(model) == before


def test_a_selector_matching_nothing_warns() -> None:
    with pytest.warns(UserWarning, match="selects no module of Sequential") as caught:
        with tgr.Recorder(_mlp(False), probes=[tgr.probe("output", where=S.type(nn.LSTM))]):
            pass
    assert [w.filename for w in caught] == [__file__]


@pytest.mark.parametrize("call, error, match", [
    (lambda: tgr.probe("output", keep="median"), ValueError, "unknown statistic: 'median'"),
    (lambda: tgr.probe("output", reduce="max"), ValueError, "unknown reduce: 'max'"),
    (lambda: tgr.probe("output", where="0"), TypeError, "where must be a torchgraphrec.select"),
    (lambda: tgr.probe("grad_output", edit=abs), ValueError, "only on the 'output' site"),
    (lambda: S.type(int), TypeError, "select.type takes nn.Module classes"),
    (lambda: tgr.Recorder(nn.Linear(1, 1), probes=["output"]), TypeError,
     r"probes must be a list of torchgraphrec.probe\(\) results"),
    (lambda: tgr.probe(["output"]), TypeError, "site must be a str"),
    (lambda: tgr.probe("output", keep=None), TypeError, "keep must be a statistic's name"),
    (lambda: tgr.probe("output", keep=[["rms"]]), TypeError, "keep must be a statistic's"),
    (lambda: tgr.Recorder(nn.Linear(1, 1), probes=tgr.probe("output")), TypeError,
     "probes must be a list of torchgraphrec.probe"),
    (lambda: tgr.Recorder(nn.Linear(1, 1), probes=None), TypeError, "probes must be a list"),
    (lambda: tgr.Recorder(nn.Linear(1, 1), memory_limit="1000"), ValueError,
     "memory_limit must be None"),
    (lambda: tgr.Recorder(nn.Linear(1, 1), memory_limit=-5), ValueError,
     "memory_limit must be None"),
    (lambda: tgr.Recorder(nn.Linear(1, 1), save_dir=123), TypeError,
     "save_dir must be None, a str"),
    (lambda: S.children(indices=5), TypeError, r"children\(indices=...\) takes a list"),
    (lambda: S.modules(indices=["a"]), TypeError, r"modules\(indices=...\) takes a list"),
    (lambda: S.label(3), TypeError, r"label\(\) takes labels"),
    (lambda: S.depth("a"), ValueError, r"depth\(\) takes an int"),
])
def test_bad_probe_arguments(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_unrecorded_key_names_what_was_recorded() -> None:
    model = _mlp(False)
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("0"))]) as rec:
        model(torch.randn(1, 4))
    with pytest.raises(KeyError, match="nothing was recorded for") as caught:
        rec["2", "output"]
    assert caught.value.args[0] == ("nothing was recorded for ('2', 'output'); recorded: "
                                    "[\"'0', 'output'\"]")


def test_hooks_are_gone_when_the_forward_raises() -> None:
    from models import Raising

    model = Raising()
    before = hook_state(model)
    probes = [tgr.probe(site, keep="rms") for site in ("output", "grad_output", "param_grad",
                                                      "param_update", "grad_input")]
    with pytest.raises(ValueError, match="bad input shape"):
        with tgr.Recorder(model, probes=probes):
            model(torch.randn(2, 3, requires_grad=True))
    assert hook_state(model) == before
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())


def test_full_copies_can_go_to_another_device() -> None:
    from torchgraphrec import stats

    model = _mlp(False)
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("0"),
                                               keep=stats.full_on("meta"))]) as rec:
        model(torch.randn(2, 4))
    (kept,) = rec["0", "output"]
    assert kept.device.type == "meta" and kept.shape == (2, 8)


def test_reduced_probes_and_steps_keep_memory_bounded() -> None:
    model = _mlp(False)
    probes = [tgr.probe("output", where=S.name("0"), keep="rms", reduce="running"),
              tgr.probe("grad_output", where=S.name("2"), keep="rms", reduce="last")]
    with tgr.Recorder(model, probes=probes, graph="first") as rec:
        for _ in range(20):
            backward_loss(model(torch.randn(2, 4))).backward()
            rec.step()
        engine = rec._engine
        assert engine._tensor_handles == []  # released at every step
    assert rec.frame().empty and rec.store.rows == []
    assert rec["0", "output"]["count"] == 20


def test_a_caught_error_in_a_probed_forward_leaves_call_indices_right() -> None:
    class Flaky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.fail = True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            if self.fail:
                raise ValueError("once")
            return y

    model = Flaky()
    with tgr.Recorder(model, probes=[tgr.probe("output")]) as rec:
        with pytest.raises(ValueError, match="once"):
            model(torch.ones(1, 2))
        model.fail = False
        model(torch.ones(1, 2))
        assert rec._engine._open == []
    table = rec.frame()
    assert list(table[table.module == ""].call_index) == [1]  # the raising call was call 0
    assert list(table[table.module == "lin"].call_index) == [0, 1]


def _sampled_run(every: int) -> tuple:
    """Seven SGD steps with probes on every site a step records, under ``every``: the frame,
    and before each step whether the model and torch are as unhooked as before the block."""
    model = _mlp(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1)
    batches = [torch.randn(2, 4) for _ in range(7)]
    probes = [tgr.probe(site, where=S.leaves(), keep="l2")
              for site in ("output", "grad_output", "param_grad", "param_update")]
    before, unhooked = hook_state(model), []
    with tgr.Recorder(model, probes=probes, graph="first", every=every) as rec:
        for x in batches:
            unhooked.append(hook_state(model) == before)
            optimizer.zero_grad()
            backward_loss(model(x)).backward()
            optimizer.step()
            rec.step()
    return rec.frame(), unhooked


def test_every_records_one_step_in_n_as_every_step_would_and_hooks_nothing_between() -> None:
    every_step, _ = _sampled_run(1)
    sampled, unhooked = _sampled_run(3)
    assert unhooked == [False, True, True, False, True, True, False]
    expected = every_step[every_step.step.isin([0, 3, 6])].reset_index(drop=True)
    assert set(expected.site) == {"output", "grad_output", "param_grad", "param_update"}
    pandas.testing.assert_frame_equal(sampled.reset_index(drop=True), expected)


@pytest.mark.parametrize("every", [0, 2.5, "10"])
def test_every_must_be_a_positive_int(every: object) -> None:
    with pytest.raises(ValueError, match="every must be a positive int"):
        tgr.Recorder(_mlp(False), every=every)


def test_steps_after_the_block_are_refused_and_attach_nothing_again() -> None:
    model = _mlp(False)
    before = hook_state(model)
    with tgr.Recorder(model, probes=[tgr.probe("output")], every=2) as rec:
        model(torch.randn(2, 4))
    recorded = rec.frame()
    for _ in range(3):
        with pytest.raises(RuntimeError, match=r"step\(\) after the Recorder's with-block"):
            rec.step()
        assert hook_state(model) == before
    model(torch.randn(2, 4))
    assert set(recorded.step) == {0}
    pandas.testing.assert_frame_equal(rec.frame(), recorded)


def _broken(tensor: torch.Tensor) -> torch.Tensor:
    raise ArithmeticError("bad statistic")


@pytest.mark.parametrize("site", ["input", "output", "param"])
def test_a_statistic_failing_at_a_forward_site_is_reported_after_the_block(site: str) -> None:
    model, x = _mlp(False), torch.randn(2, 4)
    expected = model(x)
    before = hook_state(model)
    with pytest.raises(tgr.CaptureError, match="bad statistic"):
        with tgr.Recorder(model, probes=[tgr.probe(site, where=S.name("0"), keep=_broken)]):
            output = model(x)  # the user's forward completes
            backward_loss(output).backward()
    assert torch.equal(output, expected)
    assert hook_state(model) == before


@pytest.mark.parametrize("site", ["param_grad", "param_update"])
def test_a_statistic_failing_at_a_training_site_is_reported_after_the_block(site: str) -> None:
    # param_update's failure came out of rec.step() in the first step, its hooks left on
    model, x = _mlp(False), torch.randn(2, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before, steps = hook_state(model), 0
    with pytest.raises(tgr.CaptureError, match="bad statistic"):
        with tgr.Recorder(model, probes=[tgr.probe(site, where=S.name("0"), keep=_broken)]) \
                as rec:
            for _ in range(3):
                backward_loss(model(x)).backward()
                optimizer.step()
                optimizer.zero_grad()
                rec.step()
                steps += 1
    assert steps == 3
    assert hook_state(model) == before


def test_a_parameter_unfrozen_inside_the_block_has_its_gradients_recorded() -> None:
    # gradual unfreezing: only the parameters that required grad as the block began were
    # hooked, so the first layer's gradients were never recorded with every=1
    torch.manual_seed(0)
    model = _mlp(False)
    model[0].requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches, expected = [torch.randn(2, 4) for _ in range(3)], []
    probe = tgr.probe("param_grad", where=S.name("^0$"), keep="full")
    with tgr.Recorder(model, probes=[probe]) as rec:
        for step, x in enumerate(batches):
            if step == 1:
                model[0].requires_grad_(True)
            backward_loss(model(x)).backward()
            if model[0].weight.grad is not None:
                expected.append(model[0].weight.grad.clone())
            optimizer.step()
            optimizer.zero_grad()
            rec.step()
    recorded = [entry["weight"] for entry in rec["0", "param_grad"]]
    assert len(recorded) == len(expected) == 2
    assert all(torch.equal(r, e) for r, e in zip(recorded, expected))


def test_a_module_whose_every_call_had_no_gradient_reads_none_for_each() -> None:
    model = _mlp(False)
    with tgr.Recorder(model, probes=[tgr.probe("grad_output", keep="l2")]) as rec:
        with torch.no_grad():
            model(torch.randn(2, 4))
            model(torch.randn(2, 4))
    assert rec["0", "grad_output"] == [None, None]
    with pytest.raises(KeyError, match=r"nothing was recorded for \('9', 'grad_output'\)"):
        rec["9", "grad_output"]


def test_extremes_of_an_empty_batch_are_nan_and_the_forward_completes() -> None:
    model = _mlp(False)
    with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("0"),
                                               keep=["max", "min", "absmax"])]) as rec:
        output = model(torch.randn(0, 4))
    assert output.shape == (0, 3)
    table = rec.frame()
    assert sorted(table.stat) == ["absmax", "max", "min"] and table.value.isna().all()


def test_a_raising_call_records_no_parameters_and_edits_nothing() -> None:
    class Failing(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("inner failure")

    model = nn.Sequential(Failing(2, 2))
    edited = []
    probes = [tgr.probe("param", where=S.name("0"), keep="l2"),
              tgr.probe("output", where=S.name("0"), edit=lambda out: edited.append(out))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when an always_call hook raises
        with tgr.Recorder(model, probes=probes) as rec:
            with pytest.raises(ValueError, match="inner failure"):
                model(torch.ones(1, 2))
    assert edited == []
    assert rec.frame().empty  # the failed call has no parameter rows


def test_memory_limit_keeps_reduced_probes_updating() -> None:
    model = _mlp(False)
    probes = [tgr.probe("output", where=S.name("0"), keep="full"),
              tgr.probe("output", where=S.name("2"), keep="l2", reduce="sum"),
              tgr.probe("output", where=S.name("1"), keep="rms", reduce="running"),
              tgr.probe("input", where=S.name("2"), keep="full", reduce="last")]
    total = 0.0
    seen: list[torch.Tensor] = []
    model[2].register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
    with pytest.warns(UserWarning, match="reached their memory limit of 200 bytes"):
        with tgr.Recorder(model, probes=probes, memory_limit=200) as rec:
            for _ in range(10):
                total += float(model(torch.randn(2, 4)).detach().double().norm())
                rec.step()
    kept = [entry is not None for entry in rec["0", "output"]]  # None past the limit...
    assert len(kept) == 10 and 0 < sum(kept) < 10 and kept == sorted(kept, reverse=True)
    assert float(rec["2", "output"]) == pytest.approx(total, rel=1e-6)  # ...reductions go on
    assert rec["1", "output"]["count"] == 10
    assert torch.equal(rec["2", "input"]["args[0]"], seen[-1])
    assert rec.store.bytes <= 200


def test_memory_limit_bounds_a_fold_that_grows() -> None:
    model = _mlp(False)
    grows = tgr.probe("output", where=S.name("0"), keep="full",
                      reduce=lambda old, new: torch.cat([old, new]))
    with pytest.warns(UserWarning, match="reached their memory limit of 400 bytes"):
        with tgr.Recorder(model, probes=[grows], memory_limit=400) as rec:
            for _ in range(10):  # 2 x 8 float32 outputs: 64 bytes a step
                model(torch.randn(2, 4))
                rec.step()
    assert rec.store.bytes <= 400
    assert sum(slot.nbytes() for slots in rec.store.reducers.values()
               for slot in slots.values()) == rec.store.bytes


def test_memory_limit_counts_what_cosine_remembers() -> None:
    model = _mlp(False)
    with pytest.warns(UserWarning, match="reached their memory limit of 100 bytes"):
        with tgr.Recorder(model, probes=[tgr.probe("grad_output", keep="cosine")],
                          memory_limit=100) as rec:
            for _ in range(3):
                backward_loss(model(torch.randn(2, 4))).backward()
                rec.step()
    held = sum(copy.numel() * copy.element_size() for copy in rec.store.memory.values())
    assert held == rec.store.bytes <= 100
    assert len(rec.frame()) == 3 * 4  # every cosine row is still there


def test_entries_keep_each_calls_values_together_past_the_memory_limit() -> None:
    model = _mlp(False)
    batches = [torch.randn(16, 4), torch.randn(16, 4), torch.randn(1, 4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the memory limit's
        with tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("0"),
                                                   keep=["rms", "full"])],
                          memory_limit=16 * 8 * 4 + 100) as rec:
            for x in batches:
                model(x)
                rec.step()
    entries = rec["0", "output"]
    assert [sorted(entry) for entry in entries] == [["full", "rms"], ["rms"], ["full", "rms"]]
    for entry in (entries[0], entries[2]):
        own = float(entry["full"].double().pow(2).mean().sqrt())
        assert float(entry["rms"]) == pytest.approx(own, rel=1e-6)


def test_entries_keep_each_calls_gradients_together_when_one_has_none() -> None:
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.a(x), self.b(x)

    torch.manual_seed(0)
    model = TwoHeads()
    own: list[dict[str, float]] = []

    def hook(module: nn.Module, args: tuple, outputs: tuple) -> None:
        entry: dict[str, float] = {}
        own.append(entry)
        for path, output in zip(("[0]", "[1]"), outputs):
            output.register_hook(lambda g, p=path: entry.update({p: float(g.double().pow(2)
                                                                           .mean().sqrt())}))

    model.register_forward_hook(hook)
    with tgr.Recorder(model, probes=[tgr.probe("grad_output", where=S.name("^$"),
                                               keep="rms")]) as rec:
        for weight_b in (None, 10.0):  # the first step's second output gets no gradient
            a, b = model(torch.randn(2, 4))
            (a.sum() + (b.sum() * weight_b if weight_b else 0)).backward()
            rec.step()
    recorded = [{path: float(value) for path, value in entry.items()}
                for entry in rec["", "grad_output"]]
    assert [sorted(entry) for entry in recorded] == [["[0]"], ["[0]", "[1]"]]
    for entry, expected in zip(recorded, own, strict=True):
        assert entry == pytest.approx(expected, rel=1e-6)


def _cosines_by_own_hook(model: nn.Sequential, steps: int) -> list[float]:
    """The cosine of each step's dL/d(output) of ``model[0]`` with the previous step's, in
    float64, through a tensor hook of the test's own (``nan`` the first time), on a copy."""
    model = copy.deepcopy(model)
    grads: list[torch.Tensor] = []

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        output.register_hook(lambda grad: grads.append(grad.double().flatten()))

    handle = model[0].register_forward_hook(hook)
    torch.manual_seed(5)
    for _ in range(steps):
        backward_loss(model(torch.randn(2, 4))).backward()
    handle.remove()
    return [math.nan] + [float(torch.nn.functional.cosine_similarity(a, b, dim=0))
                         for a, b in zip(grads, grads[1:])]


def _overlapping_outputs_in_order(probes: list) -> object:
    model = _mlp(False)
    with tgr.Recorder(model, probes=probes) as rec:
        for _ in range(3):
            model(torch.randn(2, 4))
            rec.step()
    return rec["2", "output"]


def test_overlapping_probes_keep_their_own_reductions_and_cosines() -> None:
    model = _mlp(False)
    expected = _cosines_by_own_hook(model, 3)
    probes = [tgr.probe("output", where=S.leaves(), keep="rms", reduce="running"),
              tgr.probe("output", where=S.name("2"), keep="rms"),
              tgr.probe("grad_output", where=S.leaves(), keep="cosine"),
              tgr.probe("grad_output", where=S.type(nn.Linear), keep=["rms", "cosine"])]
    torch.manual_seed(5)
    with tgr.Recorder(model, probes=probes) as rec:
        for _ in range(3):
            backward_loss(model(torch.randn(2, 4))).backward()
            rec.step()
    assert rec["2", "output"]["count"] == 3  # the first probe's, its calls counted once
    assert len(_overlapping_outputs_in_order(probes[1::-1])) == 3  # the per-call one's
    table = rec.frame()
    assert len(table[(table.module == "2") & (table.site == "output")]) == 3
    cosines = table[(table.module == "0") & (table.stat == "cosine")]
    for probe_rows in (cosines.iloc[0::2], cosines.iloc[1::2]):  # each probe's, per step
        assert list(probe_rows.step) == [0, 1, 2]
        assert probe_rows.value.tolist() == pytest.approx(expected, rel=1e-5, nan_ok=True)


def test_a_probe_the_memory_limit_refused_whole_is_not_listed_as_recorded() -> None:
    model = nn.Sequential(nn.Linear(3, 4))
    probes = [tgr.probe("param", keep="full", reduce="running")]
    with pytest.warns(UserWarning, match="memory limit of 8 bytes"):
        with tgr.Recorder(model, memory_limit=8, probes=probes) as rec:
            model(torch.randn(2, 3))
    missing = r"nothing was recorded for \('0', 'param'\); recorded: \[\]"
    with pytest.raises(KeyError, match=missing):
        rec["0", "param"]


def test_frame_takes_one_aggregation_by_its_name() -> None:
    model = nn.Linear(3, 3)
    with tgr.Recorder(model, probes=[tgr.probe("output", keep="rms")]) as rec:
        for _ in range(2):
            model(torch.randn(2, 3))
            rec.step()
    by_step = rec.frame(by="step", agg="mean")
    table = rec.frame()
    assert list(by_step["mean"]) == pytest.approx(list(table.groupby("step")["value"].mean()))
    assert list(by_step.columns) == ["step", "module", "site", "path", "stat", "mean"]


def test_probes_may_come_from_any_iterable() -> None:
    model = _mlp(False)
    with tgr.Recorder(model, probes=(tgr.probe(site) for site in ("input", "output"))) as rec:
        model(torch.randn(2, 4))
    assert {"input", "output"} <= set(rec.frame().site)


class _FunctionLog(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class _DispatchLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode_type", [_FunctionLog, _DispatchLog])
def test_the_users_modes_see_none_of_the_probes_own_calls(mode_type: type) -> None:
    def train(probes: Optional[list]) -> list[str]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(2, 3)
        with mode_type() as mode:
            if probes is None:
                model(x).sum().backward()
                optimizer.step()
            else:
                with tgr.Recorder(model, probes=probes, backward=False) as rec:
                    model(x).sum().backward()
                    optimizer.step()
                    rec.step()
        return mode.calls

    plain = train(None)
    probes = [tgr.probe(site, keep=["l2", "max", "full"]) for site in
              ("input", "output", "grad_output", "param", "param_grad", "param_update")]
    assert train(probes) == plain


@pytest.mark.parametrize("where", ["meta", "fake"])
def test_statistics_of_values_without_data_read_as_nan(where: str, tmp_path) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() if where == "fake" else torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        x = torch.randn(2, 4)
        with tgr.Recorder(model, probes=[tgr.probe("output", keep=["rms", "mean"])]) as rec:
            model(x)
    table = rec.frame()
    assert len(table) == 6 and table["value"].isna().all()
    assert rec.frame(by="step")["mean"].isna().all()
    loaded = tgr.load(rec.save(tmp_path / "records"))
    assert loaded.frame()["value"].isna().all()


def test_an_edit_with_every_is_refused() -> None:
    probe = tgr.probe("output", keep="l2", edit=lambda output: output * 0)
    with pytest.raises(ValueError, match="with every=2 its hooks are off in the steps"):
        tgr.Recorder(_mlp(False), probes=[probe], every=2)


@pytest.mark.parametrize("probes", [[], [tgr.probe("output", keep="l2"),
                                         tgr.probe("param_grad", keep="l2")]])
def test_a_model_copied_or_saved_inside_the_block_takes_no_recorder_along(
        probes: list, tmp_path) -> None:
    # a target network, an EMA copy, a whole-model checkpoint: the copies dragged the
    # recorder's per-module hooks along, which cannot be copied (TypeError)
    model, x = _mlp(False), torch.randn(2, 4)
    with tgr.Recorder(model, probes=probes) as rec:
        model(x).sum().backward()
        twin = copy.deepcopy(model)
        torch.save(model, tmp_path / "model.pt")
        twin(x).sum().backward()
    assert [call for call in rec.graph if call.startswith("layer:#")] == ["layer:#0"]
    if probes:  # the original's one call per module, no more
        frame = rec.frame()
        assert len(frame[frame.site == "output"]) == 4
        assert len(frame[frame.site == "param_grad"]) == 4
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    for copied in (twin, loaded):
        assert torch.equal(copied(x), model(x))
    assert hook_state(model) == hook_state(_mlp(False))


def test_a_sparse_gradient_has_its_statistics_with_its_zeros_counted() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 3, sparse=True), nn.Linear(3, 2))
    with tgr.Recorder(model, probes=[tgr.probe("param_grad", where=S.name("^0$"),
                                               keep=["rms", "nonzero", "full"])]) as rec:
        model(torch.tensor([[1, 4, 4]])).sum().backward()
    grad = model[0].weight.grad
    assert grad.is_sparse
    kept = rec["0", "param_grad"][0]["weight"]
    dense = grad.to_dense()
    assert torch.isclose(kept["rms"], dense.pow(2).mean().sqrt())
    assert float(kept["nonzero"]) == float((dense != 0).float().mean()) == pytest.approx(0.2)
    assert kept["full"].is_sparse and torch.equal(kept["full"].to_dense(), dense)


def test_running_moments_of_sparse_gradients_are_their_dense_moments() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 3, sparse=True), nn.Linear(3, 2))
    grads = []
    probe = tgr.probe("param_grad", where=S.name("^0$"), keep="full", reduce="running")
    with tgr.Recorder(model, probes=[probe]) as rec:
        for tokens in ([[1, 4, 4]], [[2, 4, 7]], [[1, 1, 9]]):
            model(torch.tensor(tokens)).sum().backward()
            grads.append(model[0].weight.grad.to_dense().double())
            model.zero_grad(set_to_none=True)
            rec.step()
    kept, every = rec["0", "param_grad"]["weight"], torch.stack(grads)
    assert kept["count"] == 3
    assert torch.allclose(kept["mean"], every.mean(0))
    assert torch.allclose(kept["var"], every.var(0))
    assert torch.equal(kept["min"], every.min(0).values)
    assert torch.equal(kept["max"], every.max(0).values)


def test_a_gradient_an_optimizer_in_the_backward_freed_warns_and_records_the_rest() -> None:
    # torch's optimizer-in-backward recipe sets p.grad = None in a hook before the probe's:
    # the whole recording failed
    model = _mlp(False)
    optimizers = {param: torch.optim.SGD([param], lr=0.1) for param in model.parameters()}

    def step(param: torch.Tensor) -> None:
        optimizers[param].step()
        optimizers[param].zero_grad(set_to_none=True)

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(step)
    before = [param.detach().clone() for param in model.parameters()]
    probes = [tgr.probe("param_grad", keep="l2"), tgr.probe("param_update", keep="l2")]
    with pytest.warns(UserWarning, match=r"a hook that ran before the probe.s set the "
                                         r"gradient of bias in '2' to None"):
        with tgr.Recorder(model, probes=probes) as rec:
            model(torch.randn(2, 4)).sum().backward()
            rec.step()
    frame = rec.frame()
    assert set(frame.site) == {"param_update"}
    update = frame[(frame.module == "0") & (frame.path == "weight")].value.item()
    with torch.no_grad():
        moved = float((model[0].weight - before[0]).norm())
    assert math.isclose(update, moved, rel_tol=1e-6)


def test_probes_inside_vmap_of_grad_read_the_batch_the_transform_holds() -> None:
    # per-sample gradients (torch.func's recipe): the statistics of the transform's wrappers
    # failed the recording, and whole copies kept wrappers that broke frame()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    params = {name: param.detach() for name, param in model.named_parameters()}
    x, y = torch.randn(5, 3), torch.randn(5, 1)

    def loss(weights: dict, sample: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (torch.func.functional_call(model, weights, (sample[None],))
                - target[None]).pow(2).sum()

    probes = [tgr.probe(site, where=S.name("^0$"), keep=["full", "l2"])
              for site in ("output", "grad_output")]
    with tgr.Recorder(model, probes=probes) as rec:
        torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    output = model[0](x)  # the independent truth: one batched forward and backward
    output.retain_grad()
    (model[2](model[1](output)) - y).pow(2).sum().backward()
    [kept_output], [kept_grad] = rec["0", "output"], rec["0", "grad_output"]
    assert torch.allclose(kept_output["full"].squeeze(1), output)
    assert torch.allclose(kept_grad["full"].squeeze(1), output.grad)
    assert torch.isclose(kept_grad["l2"], output.grad.norm())
    assert set(rec.frame().site) == {"output", "grad_output"}
