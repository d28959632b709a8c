"""Atomic writes: a failure never leaves a partial file under the final name."""

from __future__ import annotations

import os
import stat

import pytest

from torchgraphrec import files


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path, monkeypatch) -> None:
    target = tmp_path / "model.svg"
    target.write_bytes(b"old")

    class Full:
        def __init__(self, *_):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *_):
            return False

        def write(self, data):
            raise OSError("No space left on device")

    monkeypatch.setattr(files.os, "fdopen", Full)
    with pytest.raises(OSError, match="No space left"):
        files.write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.svg"]


def test_written_files_get_the_permissions_the_umask_allows(tmp_path) -> None:
    mask = os.umask(0o022)
    try:
        written = files.write_atomic(tmp_path / "a.json", b"{}")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
