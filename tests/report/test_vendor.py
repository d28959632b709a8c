"""The vendored viz-js: recorded, licensed, shipped, safe to inline, and working offline."""

from __future__ import annotations

import configparser
import importlib.util
import json
import re
from pathlib import Path

import pytest

import torchgraphrec as tgr
from helpers import fresh
from report.browser import launch, missing, open_page
from torchgraphrec.errors import TorchGraphRecError
from torchgraphrec.report import vendor
from torchgraphrec.render.engine import run_engine

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "torchgraphrec" / "report" / "templates" / "vendor"


def _refresh_script():
    spec = importlib.util.spec_from_file_location("refresh_vendor",
                                                  ROOT / "scripts" / "refresh_vendor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_vendored_file_is_the_one_recorded() -> None:
    record = json.loads((FOLDER / "VENDOR.json").read_text(encoding="utf-8"))
    script = vendor.viz_js()
    assert script.package == record["package"] == "@viz-js/viz" and record["license"] == "MIT"
    assert script.version == record["version"] and re.fullmatch(r"\d+\.\d+\.\d+", script.version)
    assert record["integrity"].startswith("sha512-")
    assert len(script.text.encode()) == record["files"]["viz-global.js"]["bytes"]
    assert script.graphviz_version == record["graphviz_version"] != "unknown"
    assert script.text.startswith("/*!") and f"Viz.js {script.version}" in script.text[:200]


def test_a_changed_file_is_refused() -> None:
    record = json.loads((FOLDER / "VENDOR.json").read_text(encoding="utf-8"))
    data = (FOLDER / "viz-global.js").read_bytes()
    vendor.check(data, record, "viz-global.js")
    with pytest.raises(TorchGraphRecError, match=r"not the file VENDOR.json .*refresh_vendor"):
        vendor.check(data + b"\n// edited", record, "viz-global.js")


def test_the_licence_covers_what_the_build_contains() -> None:
    licence = (FOLDER / "LICENSE").read_text(encoding="utf-8")
    header = vendor.viz_js().text[:400]
    for name in ("Graphviz", "Expat"):
        assert name in header and name in licence
    assert "Copyright (c) 2014-2016 Michael Daines" in licence
    assert "Eclipse Public License - v 2.0" in licence
    assert licence.count("Permission is hereby granted") == 2  # Viz.js and Expat, MIT


def test_it_can_be_inlined_in_html() -> None:
    text = vendor.viz_js().text
    assert "</script" not in text.lower() and "<!--" not in text
    assert "\x00" not in text and "\r" not in text  # the HTML parser would alter both


def test_setup_cfg_ships_it() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    patterns = config["options.package_data"]["torchgraphrec"].replace(",", " ").split()
    package = ROOT / "torchgraphrec"
    shipped = {path for pattern in patterns for path in package.glob(pattern) if path.is_file()}
    for name in ("viz-global.js", "VENDOR.json", "LICENSE"):
        assert FOLDER / name in shipped, name


def test_the_refresh_script_checks_the_tarball_hash(capsys) -> None:
    script = _refresh_script()
    assert script.integrity_of(b"") == ("sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XY"
                                        "XysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==")
    script.check_tarball(b"", script.integrity_of(b""))
    with pytest.raises(ValueError, match=r"integrity mismatch: the tarball is 'sha512-z4Ph"):
        script.check_tarball(b"", "sha512-AAAA")
    with pytest.raises(SystemExit, match="2"):
        script.main(["--version", "9.9.9"])
    assert "--version needs --integrity" in capsys.readouterr().err


def test_the_browser_helper_says_why_it_cannot_run(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCHGRAPHREC_CHROMIUM", str(tmp_path / "no-such-chromium"))
    assert missing() == "chromium is not installed (apt-get install chromium, as .ci/run does)"
    with pytest.raises(RuntimeError, match="no browser here: chromium is not installed"):
        with launch():
            pass


def test_viz_js_lays_out_our_dot_offline_as_graphviz_pure_does(browser, tmp_path: Path) -> None:
    dot = tgr.record(*fresh("resnet_like")).to_dot(depth=2)
    dot_json = json.dumps(dot).replace("<", "\\u003c")
    page = tmp_path / "viz.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><div id="out"></div>'
        f"<script>{vendor.viz_js().text}</script>"
        f'<script type="application/json" id="dot">{dot_json}'
        "</script><script>Viz.instance().then((viz) => { const svg = viz.renderString("
        "JSON.parse(document.getElementById('dot').textContent), {format: 'svg'}); "
        "document.getElementById('out').innerHTML = svg.slice(svg.indexOf('<svg')); "
        "window.svg = svg; });</script></body></html>", encoding="utf-8")
    with open_page(browser, page) as loaded:
        loaded.page.wait_for_function("window.svg !== undefined", timeout=30_000)
        svg = loaded.page.evaluate("window.svg")
        assert loaded.page.locator('#out [id="c-layer:stem#0"]').count() == 1
    assert loaded.problems == []
    assert all(url.startswith("file:") for url in loaded.requests), loaded.requests
    comments = re.compile(r"<!--.*?-->\n?", re.S)
    assert comments.sub("", svg) == comments.sub("", run_engine(dot, "svg").decode())
