"""The layers hold: capture knows nothing of probes or drawing, the graph side needs no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold() -> None:
    pytest.importorskip("importlinter")
    script = Path(sys.executable).with_name("lint-imports")  # installed beside this python
    done = subprocess.run([str(script), "--config", str(ROOT / "setup.cfg")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in done.stdout


def test_a_saved_recording_is_read_and_drawn_without_torch(tmp_path: Path) -> None:
    import torch

    import torchgraphrec as tgr

    recording = tgr.record(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2))
    saved = recording.render(tmp_path / "model.json")
    script = ("import sys; sys.modules['torch'] = None; import torchgraphrec as tgr; "
              f"g = tgr.from_json(open({str(saved)!r}).read()); tgr.validate(g); "
              "print(len(tgr.to_dot(g)) > 0)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]


def test_a_summary_is_written_without_graphviz_or_jinja2() -> None:
    script = ("import sys; sys.modules['graphviz'] = None; sys.modules['jinja2'] = None; "
              "import networkx as nx; from torchgraphrec.summary import summarize; "
              "g = nx.DiGraph(); g.add_node('layer:#0', kind='layer', qualname='', type='Net', "
              "depth=0, seq=0, parent=None, call_index=0, num_params=70_553_706_496, "
              "inputs=(), outputs=()); print('Total params: 70,553,706,496' in summarize(g))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
