"""The documentation builds with warnings as errors, notebooks executed, examples run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    pytest.importorskip("furo")
    folder = tmp_path_factory.mktemp("docs") / "docs"
    shutil.copytree(ROOT / "docs", folder, symlinks=False,
                    ignore=shutil.ignore_patterns("_build"))
    return folder


def _sphinx(source: Path, builder: str, *extra: str) -> subprocess.CompletedProcess:
    out = source.parent / "build" / builder
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           builder, *extra, str(source), str(out)],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.needs("saved_bytes")
def test_html_builds_without_warnings_and_runs_the_notebooks(source: Path) -> None:
    done = _sphinx(source, "html")
    assert done.returncode == 0, done.stderr[-3000:]
    site = source.parent / "build" / "html"
    for page in ("index", "schema", "rendering", "report", "probes", "cli", "troubleshooting",
                 "api", "changelog", "notebooks/probes"):
        assert (site / f"{page}.html").is_file(), page
    schema = (site / "schema.html").read_text(encoding="utf-8")
    assert "schema_version" in schema and "call_index" in schema  # from schema.py itself
    probes = (site / "notebooks" / "probes.html").read_text(encoding="utf-8")
    assert "grad_output" in probes and "Traceback" not in probes


@pytest.mark.needs("saved_bytes")
def test_every_example_on_the_pages_runs(source: Path) -> None:
    done = _sphinx(source, "doctest", "-D", "nb_execution_mode=off")
    report = (source.parent / "build" / "doctest" / "output.txt").read_text()
    assert done.returncode == 0, report[-3000:]
    assert "0 failures in tests" in report
    count = int(re.search(r"^\s+(\d+) tests$", report, re.M).group(1))
    assert count >= 40


def test_the_pictures_script_draws_every_picture(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import pictures
    finally:
        sys.path.remove(str(ROOT / "docs"))
    written = pictures.main(tmp_path)
    assert sorted(p.name for p in written) == ["depth0.svg", "depth1.svg", "depth2.svg",
                                               "full.svg", "paper.svg", "readme.svg"]
    committed = ROOT / "docs" / "_static" / "readme.svg"
    assert committed.read_bytes() == (tmp_path / "readme.svg").read_bytes(), (
        "docs/_static/readme.svg is stale: run python docs/pictures.py")
