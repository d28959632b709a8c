"""``torchgraphrec summary``: the table of a factory's model or of a saved recording."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchgraphrec.cli import main

FACTORY = textwrap.dedent("""
    import torch

    def model():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3),
                                   torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Flatten()))
""")


@pytest.fixture
def factory(tmp_path: Path) -> str:
    path = tmp_path / "summary_factories.py"
    path.write_text(FACTORY)
    return f"{path}:model"


@pytest.mark.needs("saved_bytes")
def test_summary_prints_the_table_with_flops_and_saved_bytes(factory: str, capsys) -> None:
    assert main(["summary", factory, "--input-shape", "1,3,8,8", "--flops", "--memory"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-3:] == ["FLOPs", "Saved", "Forward"]
    conv = next(line for line in lines if line.split()[:3] == ["Conv2d", "(0):", "1-1"])
    # Conv2d(3, 4, 3) on 8×8 as PyTorch counts it: 2 × (4×6×6 outputs) × (3×3×3 inputs each)
    assert conv.split()[3:6] == ["1×3×8×8", "1×4×6×6", "112"]
    assert f"{2 * 4 * 6 * 6 * 27 / 1000:.1f} kFLOPs" in conv
    assert "Total params: 112" in lines and lines[-1] == "5 module calls in Sequential"
    assert any(line.split()[:3] == ["ReLU", "(0):", "2-1"] for line in lines)


def test_summary_depth_and_backward(factory: str, capsys) -> None:
    assert main(["summary", factory, "--input-shape", "1,3,8,8", "--depth", "1",
                 "--backward"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "FLOPs" not in lines[0] and lines[0].split()[-1] == "Backward"
    rows = lines[2:lines.index(lines[1], 2)]
    assert [row.split()[0] for row in rows] == ["Sequential", "Conv2d", "Sequential"]


def test_summary_of_a_saved_recording_never_imports_torch(tmp_path: Path) -> None:
    assert main(["demo", "-o", str(tmp_path)]) == 0
    script = (f"import sys; from torchgraphrec.cli import main; "
              f"code = main(['summary', {str(tmp_path / 'demo.json')!r}, '--depth', '0']); "
              f"assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].startswith("DemoNet ")


@pytest.mark.parametrize("argv, match", [
    (["summary", "FILE"], "returned a model without inputs: give --input-shape"),
    (["summary", "missing.json"], "No such file or directory"),
])
def test_summary_errors_are_one_line_with_status_1(argv, match, factory, tmp_path, capsys,
                                                   monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([factory if a == "FILE" else a for a in argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchgraphrec: error: ") and "\n" not in err and match in err


def test_summary_depth_must_be_a_number_or_all(factory: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["summary", factory, "--depth", "-1"])
    assert exited.value.code == 2
    assert "depth must be a number >= 0 or 'all', got '-1'" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "said"), [("--flops", "FLOPs"), ("--memory", "saved bytes"),
                                              ("--backward", "a backward")])
def test_summary_costs_of_a_recording_without_them_say_how_to_get_them(
        tmp_path: Path, capsys, option: str, said: str) -> None:
    from torchgraphrec.recorder import record

    import torch

    saved = record(torch.nn.Linear(2, 2), torch.ones(1, 2)).render(tmp_path / "rec.json")
    assert main(["summary", str(saved), option]) == 1
    err = capsys.readouterr().err
    assert f"was recorded without {said}" in err and f"{option[2:]}=True" in err
    assert f"--input-shape ... {option}" in err


def test_summary_without_memory_says_the_saved_bytes_were_not_counted(factory: str,
                                                                      capsys) -> None:
    assert main(["summary", factory, "--input-shape", "1,3,8,8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "Saved" not in lines[0].split()
    assert "Saved activations: not counted (memory=True counts them where torch allows)" in lines
