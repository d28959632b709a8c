"""Engine resolution, PNG caps, PDF, and the errors when an engine is missing or fails."""

from __future__ import annotations

import struct

import pytest

import torchgraphrec as tgr
from helpers import fresh
from models import deep_mlp
from torchgraphrec.render import engine as engines
from torchgraphrec.render.engine import EngineError, find_engines, resolve_engine, run_engine

PURE = next(e for e in find_engines() if e.name == "graphviz-pure")
PDF_ENGINES = [e for e in find_engines() if "pdf" in e.formats]


@pytest.fixture
def only_pure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with graphviz-pure and nothing else."""
    monkeypatch.setattr(engines, "find_engines", lambda: (PURE,))
    monkeypatch.delenv("TORCHGRAPHREC_DOT", raising=False)


def test_graphviz_pure_is_found_through_package_metadata() -> None:
    assert PURE.path and PURE.path.endswith(("graphviz-pure", "graphviz-pure.exe"))
    assert "graphviz-pure" in PURE.version and "svg" in PURE.formats
    assert resolve_engine("svg").name == "graphviz-pure"


def test_pdf_without_an_engine_names_both_remedies(only_pure: None, tmp_path) -> None:
    recording = tgr.record(*fresh("mlp"))
    with pytest.raises(EngineError, match=r"system Graphviz.*\[pdf\] extra"):
        recording.render(tmp_path / "model.pdf")
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not PDF_ENGINES, reason="neither system dot nor the [pdf] extra is installed")
def test_pdf_is_written_by_a_pdf_engine(tmp_path) -> None:
    path = tgr.record(*fresh("resnet_like")).render(tmp_path / "model.pdf")
    assert path.read_bytes().startswith(b"%PDF")


def test_explicit_engine_and_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_engine("svg", "graphviz-pure").name == "graphviz-pure"
    monkeypatch.setenv("TORCHGRAPHREC_DOT", PURE.path)
    assert resolve_engine("png").path == PURE.path
    with pytest.raises(EngineError, match="engine 'graphviz-pure' cannot write 'pdf'"):
        resolve_engine("pdf", "graphviz-pure")
    with pytest.raises(EngineError, match="engine 'no-such-dot' was not found"):
        resolve_engine("svg", "no-such-dot")


def test_engine_failure_is_reported_with_its_message() -> None:
    with pytest.raises(EngineError, match="graphviz-pure failed to write svg: .*syntax"):
        run_engine("digraph { a -> }", "svg", "graphviz-pure")


def test_a_killed_engine_is_an_error(tmp_path) -> None:
    script = tmp_path / "dying-dot"
    script.write_text("#!/bin/sh\nkill -9 $$\n")
    script.chmod(0o755)
    with pytest.raises(EngineError, match="dying-dot failed to write svg"):
        run_engine("digraph { a }", "svg", str(script))


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_png_is_capped_in_size() -> None:
    recording = tgr.record(*deep_mlp(60, 4))
    width, height = _png_size(run_engine(recording.to_dot(fold_repeats=False), "png"))
    limit = engines.PNG_MAX_INCHES * 96
    assert height <= limit and width <= limit
    assert height > 0.9 * limit  # it was scaled down to the cap, not left huge or tiny


def test_doctor_lists_engines_and_formats() -> None:
    from torchgraphrec.commands import doctor_report

    report = "\n".join(doctor_report())
    assert "engine graphviz-pure: graphviz-pure - graphviz-pure version" in report
    assert "svg: written by graphviz-pure" in report
    assert ("pdf: written by" in report) == bool(PDF_ENGINES)
