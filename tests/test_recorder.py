"""Recorder's own bookkeeping across a run: how often a step writes ``save_dir``'s file."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from torchgraphrec import recorder as recorder_module


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A clock the test moves, and ``save_rank`` noting when it wrote and taking 0.5 s."""
    clock = {"now": 100.0, "writes": []}
    real_save = recorder_module.save_rank

    def timed_save(graph, folder):
        clock["writes"].append(clock["now"])
        clock["now"] += 0.5
        return real_save(graph, folder)

    monkeypatch.setattr(recorder_module, "_now", lambda: clock["now"])
    monkeypatch.setattr(recorder_module, "save_rank", timed_save)
    return clock


def test_steps_write_save_dirs_file_at_most_a_twentieth_of_the_run(fake_clock, tmp_path) -> None:
    model = nn.Linear(2, 2)
    with tgr.Recorder(model, save_dir=tmp_path) as rec:
        for _ in range(30):
            model(torch.ones(1, 2)).sum().backward()
            rec.step()
            fake_clock["now"] += 1.0  # a training step of one second
    # the first step writes; then a step writes once 20 writes' time has passed since the
    # last write began (10 s here); leaving the block always writes
    assert fake_clock["writes"] == [100.0, 110.5, 121.0, 131.5]
    saved = tgr.from_json((tmp_path / "rank-0.json").read_text(encoding="utf-8"))
    ops = [attrs["name"] for _, attrs in saved.nodes(data=True) if attrs["kind"] == "op"]
    assert ops.count("linear") == 30  # the last write holds every forward


def test_quick_writes_happen_at_every_step(fake_clock, tmp_path, monkeypatch) -> None:
    def instant_save(graph, folder):
        fake_clock["writes"].append(fake_clock["now"])

    monkeypatch.setattr(recorder_module, "save_rank", instant_save)
    model = nn.Linear(2, 2)
    with tgr.Recorder(model, save_dir=tmp_path) as rec:
        for _ in range(3):
            model(torch.ones(1, 2))
            rec.step()
            fake_clock["now"] += 0.25
    assert fake_clock["writes"] == [100.0, 100.25, 100.5, 100.75]


@pytest.mark.parametrize("mark", ["step", "epoch"])
@pytest.mark.parametrize("probes", [[], [tgr.probe("output", keep="mean")]])
def test_steps_and_epochs_outside_the_block_are_refused(mark: str, probes: list) -> None:
    model = nn.Linear(2, 2)
    rec = tgr.Recorder(model, probes=probes)
    with pytest.raises(RuntimeError, match=rf"{mark}\(\) before the Recorder's with-block"):
        getattr(rec, mark)()
    with rec:
        model(torch.randn(1, 2))
        getattr(rec, mark)()
    recorded = rec.frame() if probes else None
    with pytest.raises(RuntimeError, match=rf"{mark}\(\) after the Recorder's with-block"):
        getattr(rec, mark)()
    if probes:  # nothing recorded by the refused call
        assert rec.frame().equals(recorded)


def test_a_failure_inside_the_recorder_is_one_short_line_with_the_whole_error_as_cause() -> None:
    # torch's dispatcher errors list every backend: the message was thousands of characters
    def statistic(tensor: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("no kernel for SparseCPU\n\n" + "CPU: registered at x\n" * 300)

    model = nn.Linear(2, 2)
    with pytest.raises(tgr.CaptureError, match=r"^the recorder failed: NotImplementedError\("
                                               r"'no kernel for SparseCPU'\)$") as caught:
        with tgr.Recorder(model, probes=[tgr.probe("output", keep=statistic)]):
            model(torch.ones(1, 2))
    assert isinstance(caught.value.__cause__, NotImplementedError)
    assert str(caught.value.__cause__).count("registered at") == 300
