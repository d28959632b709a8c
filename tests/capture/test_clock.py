"""The recording's clock: what each gap between boundaries gives up, on a clock the test drives."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import drive_capture_clock
from torchgraphrec.capture import calibrate
from torchgraphrec.capture.capture import Capture

NOW = [10**9]  # the fake perf_counter_ns: only the model's own Python moves it


def _advance(ns: int) -> None:
    NOW[0] += ns


class _Step(nn.Module):
    """``before`` ns of the model's Python, one op, then ``after`` ns."""

    def __init__(self, before: int, after: int = 0) -> None:
        super().__init__()
        self.before, self.after = before, after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _advance(self.before)
        x = torch.mul(x, 2)  # a C++ function: its calibrated cost is the op's (0 here)
        _advance(self.after)
        return x


@pytest.fixture
def driven_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every clock read of the hooks, the handler and the clock returns :data:`NOW`; the
    calibrated costs are 0 but for a Python function's (which no op here is), so that the
    cap (twice the greatest) is 1,000 ns and nothing else is taken off."""
    drive_capture_clock(monkeypatch, lambda: NOW[0],
                        calibrate.DispatchCosts(call=0, op=0, python_op=500, pack=0))
    yield


def _times(graph: Any) -> dict[str, tuple[int, int]]:
    return {attrs.get("qualname", node): (attrs["t_start_ns"], attrs["t_end_ns"])
            for node, attrs in graph.nodes(data=True) if attrs["kind"] == "layer"}


@pytest.mark.usefixtures("driven_clock")
def test_each_gap_gives_up_the_least_of_its_kind_so_far_and_never_more_than_itself() -> None:
    model = nn.Sequential(_Step(3_000), _Step(800), _Step(2_000))
    graph = tgr.record(model, (torch.ones(2),)).graph
    times = _times(graph)
    ops = sorted((attrs for _, attrs in graph.nodes(data=True) if attrs["kind"] == "op"),
                 key=lambda attrs: attrs["seq"])
    # Where the clock stood still between two boundaries (it does through every hook here),
    # the later is a nanosecond after the earlier, and the next gap that holds time pays
    # those nanoseconds back. Before the first op: 3,000 ns, less the 2 the root's and the
    # call's starts took, give up the cap (1,000, the least so far); before the second,
    # 800 ns less the 3 taken since are below it: all of them go but the nanosecond that
    # keeps the op after its call's start, and 797 becomes the least; before the third,
    # 2,000 ns less 3 give up 797. The gaps before calls and ends hold nothing.
    assert [op["t_start_ns"] - times[q][0] for op, q in zip(ops, "012")] == [1_998, 1, 1_200]
    assert [op["t_end_ns"] - op["t_start_ns"] for op in ops] == [1, 1, 1]  # their calls alone
    # each call ends a nanosecond after its op
    assert [end - start for start, end in (times["0"], times["1"], times["2"])] == \
        [2_000, 3, 1_202]
    # the forward ran 5,800 ns and its gaps gave up 2,593; the root started a nanosecond
    # in, and ended three after the last op started (the op's end and two calls' ends)
    assert times[""][1] - times[""][0] == 5_800 - 2_593 - 1 + 3


def test_times_rise_strictly_in_the_order_they_were_observed() -> None:
    # tied stamps are what no trace viewer can nest: an op or call that is an instant at its
    # parent's end reads as outside it. Calibrated costs far above any gap make every
    # boundary's time the latest one before it, which is where ties would come from
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Identity(), nn.ReLU()), nn.Tanh())
    costs = calibrate.DispatchCosts(call=10**9, op=10**9, python_op=10**9, pack=10**9)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("torchgraphrec.capture.capture.dispatch_costs", lambda: costs)
        graph = tgr.record(model, torch.randn(2, 4, requires_grad=True), backward=True).graph
    timed = [attrs for _, attrs in graph.nodes(data=True) if attrs["kind"] in ("layer", "op")]
    for start, end in (("t_start_ns", "t_end_ns"), ("t_backward_start_ns", "t_backward_end_ns")):
        spans = [(attrs[start], attrs[end]) for attrs in timed if start in attrs]
        assert spans and all(begin < finish for begin, finish in spans)
    calls = sorted((a for a in timed if a["kind"] == "layer"), key=lambda a: a["t_start_ns"])
    ops = sorted((a for a in timed if a["kind"] == "op"), key=lambda a: a["seq"])
    stamps = [t for op in ops for t in (op["t_start_ns"], op["t_end_ns"])]
    assert stamps == sorted(set(stamps))  # one op after another, none sharing a nanosecond
    for call in calls:
        inner = [t for op in ops if _inside(graph, op, call) for t in (op["t_start_ns"],
                                                                       op["t_end_ns"])]
        assert all(call["t_start_ns"] < t < call["t_end_ns"] for t in inner)


def _inside(graph: Any, op: dict, call: dict) -> bool:
    up = op["parent"]
    while up is not None:
        if graph.nodes[up] is call:
            return True
        up = graph.nodes[up]["parent"]
    return False


class _Varying(nn.Module):
    """Runs the next of ``befores`` ns of the model's Python before its op, a forward each."""

    def __init__(self, befores: list[int]) -> None:
        super().__init__()
        self.befores = befores

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _advance(self.befores.pop(0))
        return torch.mul(x, 2)


@pytest.mark.usefixtures("driven_clock")
def test_the_least_gaps_carry_over_to_the_next_forward() -> None:
    model = nn.Sequential(_Varying([300, 500]))
    with tgr.Recorder(model, backward=False) as recorder:
        model(torch.ones(2))
        model(torch.ones(2))
    calls = sorted((attrs for _, attrs in recorder.graph.nodes(data=True)
                    if attrs["kind"] == "layer" and attrs["qualname"] == "0"),
                   key=lambda attrs: attrs["call_index"])
    # the first forward's 300 ns, less the 2 the root's and the call's starts took (the
    # clock stands still through the hooks, and each boundary is a nanosecond after the
    # last), go whole but a nanosecond and become the least gap before an op: the call
    # spans its op's start, its end and its own, a nanosecond each. The second forward's
    # 500 ns give up those 298 (not the cap) and pay back the 5 taken since
    assert [attrs["t_end_ns"] - attrs["t_start_ns"] for attrs in calls] == \
        [3, 500 - 298 - 5 + 2]


class _AttentionThenStep(nn.Module):
    """A fast-path attention (its one fused ATen op, recorded by the ATen-level mode),
    then 3,000 ns of the model's Python before an op of the torch level."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.step = _Step(3_000)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return self.step(self.attention(q, q, q, need_weights=False)[0])


@pytest.mark.usefixtures("driven_clock")
def test_fused_aten_ops_are_a_kind_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # the gap before the fused kernel holds nothing here (the driven clock stands still
    # through the attention's Python): had it been a gap before a torch-level op, every
    # later op's gap would give up nothing
    monkeypatch.setattr("torchgraphrec.capture.fastpath.dispatch_mode_cost", lambda: 0)
    model = _AttentionThenStep().eval()
    with torch.no_grad():
        graph = tgr.record(model, (torch.ones(2, 4, 8),)).graph
    names = {attrs["name"] for _, attrs in graph.nodes(data=True) if attrs["kind"] == "op"}
    assert "_native_multi_head_attention" in names  # the fast path was taken
    start, end = _times(graph)["step"]
    # the 3,000 ns gave up the cap and paid back the 6 the boundaries before them took (the
    # root's, the attention's and the step's starts, the kernel's two, the attention's
    # end); the step ends two nanoseconds after its op starts
    assert end - start == 3_000 - 1_000 - 6 + 2


def test_where_nothing_is_calibrated_the_clock_lets_no_gap_give_anything_up() -> None:
    # under a user's torch-function mode the dispatch cannot be measured (it would run
    # through the user's mode): nothing is taken off, and the cap is 0. Measured before,
    # the costs would serve: as in a process's first recording, they are not
    calibrate._measured.cache_clear()

    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                               kwargs: dict | None = None) -> Any:
            return func(*args, **(kwargs or {}))

    with Passing():
        clock = Capture(nn.Linear(2, 2)).state.clock
    assert clock.costs == calibrate.NO_COSTS
    assert (clock.cap, clock.before_call, clock.before_op, clock.before_aten,
            clock.before_end) == (0, 0, 0, 0, 0)


_FIRST_UNDER_USER_HOOKS = """
import collections, torch, torchgraphrec
from torchgraphrec import _torch
seen = collections.Counter()
def look(module, args):  # a user's global hook that takes every call to have a tensor
    seen[(type(module).__name__, tuple(args[0].shape))] += 1
packed = collections.Counter()
def pack(tensor):
    packed[tuple(tensor.shape)] += 1
    return tensor
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
x = torch.randn(3, 4)
handle = torch.nn.modules.module.register_module_forward_pre_hook(look)
for run in (model, lambda x: torchgraphrec.record(model, x).output):
    seen.clear(); packed.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run(x)
    print(sorted(seen.items()), sorted(packed.items()))
print(_torch.SAVED_TENSOR_HOOKS_READABLE)
"""


def test_a_processs_first_recording_under_a_users_hooks_shows_them_only_the_model() -> None:
    # measuring the costs of reaching the hooks makes a thousand calls and packs, and the
    # features of this torch are probed with calls without tensors: none of which the
    # user's own global module hooks and saved-tensor hooks may see
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FIRST_UNDER_USER_HOOKS],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    plain, recorded, readable = done.stdout.strip().split("\n")
    plain_calls, recorded_calls = (line.split("] [")[0] for line in (plain, recorded))
    assert recorded_calls == plain_calls
    assert "('Linear', (3, 4))" in plain_calls
    if readable == "True":  # else torch cannot say that the user's pack hook is there
        assert recorded == plain


def test_costs_measured_once_serve_every_later_recording_under_any_hooks() -> None:
    # measuring is what must not run through the user's hooks (or an outer recorder's);
    # once measured, the costs are the process's, whatever hooks come later
    measured = calibrate.dispatch_costs()
    if measured == calibrate.NO_COSTS:
        pytest.skip("nothing could be measured in this process")
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)
    try:
        assert calibrate.dispatch_costs() == measured
        with tgr.Recorder(nn.Linear(2, 2)) as outer:
            inner = Capture(outer.model)
            assert inner.state.clock.costs == measured
    finally:
        handle.remove()
