"""Recording.render: the format follows the suffix; files appear whole or not at all."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree

import networkx as nx
import pytest

import torchgraphrec as tgr
from helpers import fresh
from torchgraphrec.render import options as render_options
from torchgraphrec.report import write as writer


@pytest.fixture(scope="module")
def recording() -> tgr.Recording:
    return tgr.record(*fresh("resnet_like"))


@pytest.mark.parametrize("suffix, check", [
    (".svg", lambda data: ElementTree.fromstring(data).tag.endswith("svg")),
    (".png", lambda data: data.startswith(b"\x89PNG")),
    (".dot", lambda data: data.startswith(b"digraph ResNetLike {")),
    (".gv", lambda data: data.startswith(b"digraph ResNetLike {")),
    (".json", lambda data: json.loads(data)["format"] == "torchgraphrec.recording"),
    (".graphml", lambda data: b"<graphml" in data),
])
def test_the_suffix_names_the_format(recording, tmp_path, suffix: str, check) -> None:
    path = recording.render(tmp_path / f"model{suffix}")
    assert path == tmp_path / f"model{suffix}"
    assert check(path.read_bytes())
    assert [p.name for p in tmp_path.iterdir()] == [f"model{suffix}"]


def test_json_file_reads_back_equal(recording, tmp_path) -> None:
    path = recording.render(tmp_path / "model.json")
    assert nx.utils.graphs_equal(tgr.from_json(path.read_text()), recording.graph)


def test_graphml_keeps_every_node(recording, tmp_path) -> None:
    path = recording.render(tmp_path / "model.graphml")
    read = nx.read_graphml(path)
    assert set(read.nodes) == set(recording.graph.nodes)
    assert read.nodes["tensor:0@v0"]["shape"] == "[2, 3, 16, 16]"


def test_unknown_suffix_lists_the_known_ones(recording, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"unknown format: '.bmp' \(must be one of \['.dot'"):
        recording.render(tmp_path / "model.bmp")


@pytest.mark.parametrize("options, error, match", [
    ({"depth": -1}, ValueError, "depth must be 'auto', None or a whole number >= 0, got -1"),
    ({"rankdir": "up"}, ValueError, r"unknown rankdir: 'up' \(must be one of"),
    ({"theme": "neon"}, ValueError, r"unknown theme: 'neon' \(must be one of \['default', 'paper'\]"),
    ({"include_ops": "no"}, ValueError, "include_ops must be True, False or 'all', got 'no'"),
    ({"colour": "red"}, TypeError, "unknown option 'colour'"),
])
def test_options_are_validated_once(recording, options, error, match) -> None:
    with pytest.raises(error, match=match):
        recording.to_dot(**options)


def test_a_failed_write_leaves_no_file(recording, tmp_path, monkeypatch) -> None:
    def failing(graph, options):
        raise OSError("No space left on device")

    monkeypatch.setitem(writer.FORMATS, ".svg", failing)
    with pytest.raises(OSError, match="No space left on device"):
        recording.render(tmp_path / "model.svg")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_path_is_a_clear_error(recording, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        recording.render(tmp_path / "missing" / "model.svg")


def test_paper_theme_is_greyscale_and_serif(recording) -> None:
    dot = recording.to_dot(theme="paper")
    colours = set(re.findall(r'#[0-9a-fA-F]{6}', dot))
    assert colours and all(c[1:3] == c[3:5] == c[5:7] for c in colours)
    assert "Times-Roman" in dot and "Helvetica" not in dot


def test_every_colour_is_six_digit_hex(recording) -> None:
    for theme in render_options.THEMES:
        dot = recording.to_dot(theme=theme)
        assert not re.search(r'"#[0-9a-fA-F]{3}"', dot)


def test_written_files_get_ordinary_permissions(recording, tmp_path) -> None:
    import os
    import stat

    mask = os.umask(0o022)
    try:
        path = recording.render(tmp_path / "model.svg")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.parametrize("name, check", [
    ("model.me.json", lambda doc: doc["graphs"][0]["id"] == "ResNetLike"),
    ("run.TRACE.json", lambda doc: doc["traceEvents"][0]["ph"] == "M"),
    ("model.v2.json", lambda doc: doc["format"] == "torchgraphrec.recording"),
])
def test_compound_suffixes_name_the_export_before_plain_json(recording, tmp_path, name,
                                                             check) -> None:
    assert check(json.loads(recording.render(tmp_path / name).read_text()))


@pytest.mark.parametrize("name, options, match", [
    ("run.trace.json", {"depth": 1}, r"unknown option 'depth' for .trace.json \(must be one "
                                     r"of \[\]\)"),
    ("model.me.json", {"data": "flops"}, r"unknown option 'data' for .me.json"),
    ("model.svg", {"data": "flops"}, r"unknown option 'data' \(must be one of \['depth'"),
])
def test_each_format_takes_its_own_options(recording, tmp_path, name, options, match) -> None:
    with pytest.raises(TypeError, match=match):
        recording.render(tmp_path / name, **options)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("dpi", [0, 2.5, True, 5000])
def test_dpi_is_a_whole_number_in_range(recording, dpi) -> None:
    with pytest.raises(ValueError, match=r"dpi must be a whole number from 1 to 1200, got "):
        recording.to_dot(dpi=dpi)


def test_png_dpi_scales_the_bitmap(recording, tmp_path) -> None:
    def width(**options) -> int:
        path = recording.render(tmp_path / "model.png", **options)
        return int.from_bytes(path.read_bytes()[16:20], "big")  # the PNG header's width

    assert abs(width(dpi=48) / width() - 0.5) < 0.05
