"""Regressions for bugs a code review found: each test failed before its fix."""

from __future__ import annotations

import math
import subprocess
import sys

import networkx as nx
import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from torchgraphrec import select as S


def test_data_flows_between_top_level_calls() -> None:
    model = nn.Linear(2, 2)
    with tgr.Recorder(model) as rec:
        y = model(torch.randn(1, 2))
        model(y)
    graph = rec.graph
    first_input = next(n for n, a in graph.nodes(data=True) if a.get("role") == "input")
    last_output = max((n for n, a in graph.nodes(data=True) if a["kind"] == "tensor"),
                      key=lambda n: graph.nodes[n]["seq"])
    assert nx.has_path(graph, first_input, last_output)
    tgr.validate(graph)


def test_a_recorder_records_one_block() -> None:
    model = nn.Linear(2, 2)
    rec = tgr.Recorder(model)
    with rec:
        model(torch.randn(1, 2))
    with pytest.raises(RuntimeError, match="has recorded already"):
        with rec:
            model(torch.randn(1, 2))
    tgr.validate(rec.graph)


def test_no_note_on_an_exception_the_user_already_caught() -> None:
    class Quiet(nn.Module):
        def forward(self, x: torch.Tensor) -> None:
            return None

    model = Quiet()
    try:
        raise KeyError("the user's own")
    except KeyError as error:
        tgr.record(model, torch.ones(1))
        assert not getattr(error, "__notes__", None)


def test_cosine_compares_the_same_call_and_starts_fresh_per_recorder() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(self.lin(x))

    model = Twice()
    probe = tgr.probe("output", where=S.name("lin"), keep="cosine")
    for _ in range(2):
        with tgr.Recorder(model, probes=[probe]) as rec:
            for _ in range(2):
                model(torch.randn(2, 3))
                rec.step()
        table = rec.frame()
        first_step = table[table.step == 0]
        assert list(first_step.call_index) == [0, 1]
        assert all(math.isnan(v) for v in first_step.value)
        assert not any(math.isnan(v) for v in table[table.step == 1].value)


def test_summary_totals_the_whole_model() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3))
    with tgr.Recorder(model) as rec:
        model[2](torch.randn(1, 2))
        model(torch.randn(1, 2))
    lines = rec.summary().splitlines()
    assert "Total params: 15" in lines  # model[2]'s parameters once, not again in the model's
    assert lines[-1] == "5 module calls in Sequential"


def test_a_failed_enter_leaves_the_recorder_as_it_was() -> None:
    model = nn.Linear(2, 2)
    rec = tgr.Recorder(model, probes=[tgr.probe("output", where=S.name("nothing"))])
    for _ in range(2):
        with pytest.raises(ValueError, match="unknown module name 'nothing'"):
            with rec:
                pass


def test_summary_of_a_saved_recording_needs_no_torch(tmp_path) -> None:
    path = tgr.record(nn.Linear(2, 2), torch.ones(1, 2)).render(tmp_path / "r.json")
    script = (f"import sys, pathlib, torchgraphrec as tgr; from torchgraphrec import Recording; "
              f"text = Recording(tgr.from_json(pathlib.Path({str(path)!r}).read_text())).summary(); "
              f"assert 'Linear' in text; assert 'torch' not in sys.modules, 'torch was imported'")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
