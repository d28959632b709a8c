"""The vendored JavaScript a report may inline: viz-js, Graphviz compiled to WebAssembly."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from torchgraphrec.errors import TorchGraphRecError

__all__ = ["Vendored", "viz_js", "check"]

_FOLDER = ("templates", "vendor")


@dataclass(frozen=True)
class Vendored:
    """A vendored script: what it is (from ``VENDOR.json``) and its text."""

    package: str
    version: str
    graphviz_version: str
    sha256: str
    text: str


def check(data: bytes, record: dict[str, Any], name: str) -> None:
    """Refuse ``data`` unless it is the file ``VENDOR.json`` records under ``name``.

    >>> check(b"x", {"files": {"a.js": {"sha256": "0" * 64, "bytes": 1}}}, "a.js")
    Traceback (most recent call last):
    torchgraphrec.errors.TorchGraphRecError: vendored a.js is not the file VENDOR.json ...
    """
    expected = record["files"][name]["sha256"]
    found = hashlib.sha256(data).hexdigest()
    if found != expected:
        raise TorchGraphRecError(f"vendored {name} is not the file VENDOR.json records (sha256 "
                                 f"{found[:12]}... != {expected[:12]}...): run "
                                 "scripts/refresh_vendor.py")


@lru_cache(maxsize=None)
def viz_js() -> Vendored:
    """viz-js's browser build (the wasm inline, so one ``<script>`` works offline from
    ``file://``), checked against its recorded sha256.

    It defines the global ``Viz``; ``Viz.instance()`` resolves to an object whose
    ``renderString(dot, {format: "svg"})`` lays out DOT."""
    folder = resources.files("torchgraphrec.report").joinpath(*_FOLDER)
    record = json.loads(folder.joinpath("VENDOR.json").read_text(encoding="utf-8"))
    data = folder.joinpath("viz-global.js").read_bytes()
    check(data, record, "viz-global.js")
    return Vendored(record["package"], record["version"], record["graphviz_version"],
                    record["files"]["viz-global.js"]["sha256"], data.decode("utf-8"))
