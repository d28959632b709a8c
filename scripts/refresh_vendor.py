"""Refresh the vendored viz-js (Graphviz in WebAssembly) from the npm registry, hash-checked.

    python scripts/refresh_vendor.py                     # re-fetch the pinned version
    python scripts/refresh_vendor.py --version 3.32.0 --integrity sha512-...

The pin (package, version, the registry's ``sha512`` integrity) lives in ``VENDOR.json``
beside the vendored file. The script runs ``npm pack`` in a temporary folder, checks the
tarball's own sha512 against the pin, checks the package still says MIT and still names the
software bundled in its object code (Graphviz, Expat: their notices are in ``LICENSE``),
copies the browser build with the wasm inline (``dist/viz-global.js``) and rewrites
``VENDOR.json`` with the file's sha256 and size. Take ``--integrity`` for a new version from
``npm view @viz-js/viz@VERSION dist.integrity`` and review the changelog before committing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["main", "refresh", "check_tarball", "VENDOR"]

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "torchgraphrec" / "report" / "templates" / "vendor"
BUILD = "package/dist/viz-global.js"
METADATA = "package/lib/metadata.js"
NOTICES = ("Graphviz", "Expat")


def integrity_of(data: bytes) -> str:
    """The npm ``integrity`` string (``sha512-`` and base64) of a tarball's bytes."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def npm_pack(spec: str, folder: Path) -> Path:
    """``npm pack spec`` into ``folder``: the tarball's path."""
    done = subprocess.run(["npm", "pack", "--json", "--pack-destination", str(folder), spec],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"npm pack {spec} failed: {done.stderr.strip()[-2000:]}")
    (packed,) = json.loads(done.stdout)
    return folder / packed["filename"]


def check_tarball(data: bytes, integrity: str) -> None:
    """Refuse a tarball whose sha512 is not the pinned one."""
    found = integrity_of(data)
    if found != integrity:
        raise ValueError(f"integrity mismatch: the tarball is {found!r}, the pin {integrity!r}")


def _read(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    if member is None:
        raise ValueError(f"the tarball has no file {name!r}")
    return member.read()


def refresh(pin: dict[str, Any], folder: Path = VENDOR) -> dict[str, Any]:
    """Fetch, check and copy the pinned package into ``folder``; the new ``VENDOR.json``."""
    with tempfile.TemporaryDirectory() as scratch:
        tarball = npm_pack(f"{pin['package']}@{pin['version']}", Path(scratch))
        data = tarball.read_bytes()
        check_tarball(data, pin["integrity"])
        with tarfile.open(tarball) as archive:
            manifest = json.loads(_read(archive, "package/package.json"))
            build = _read(archive, BUILD)
            metadata = _read(archive, METADATA).decode()
    if manifest["name"] != pin["package"] or manifest["version"] != pin["version"]:
        raise ValueError(f"npm gave {manifest['name']}@{manifest['version']}, not the pin")
    if manifest.get("license") != "MIT":
        raise ValueError(f"licence changed to {manifest.get('license')!r}: review LICENSE")
    header = build[:400].decode("utf-8", "replace")
    if not all(name in header for name in NOTICES):
        raise ValueError(f"the build's notice no longer names {NOTICES}: review LICENSE")
    graphviz = re.search(r'graphvizVersion = "([^"]+)"', metadata)
    record = {
        "package": pin["package"], "version": pin["version"], "license": "MIT",
        "integrity": pin["integrity"], "source": f"npm pack {pin['package']}@{pin['version']}",
        "graphviz_version": graphviz.group(1) if graphviz else "unknown",
        "files": {"viz-global.js": {"from": BUILD.removeprefix("package/"),
                                    "sha256": hashlib.sha256(build).hexdigest(),
                                    "bytes": len(build)}},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "viz-global.js").write_bytes(build)
    (folder / "VENDOR.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if not (folder / "LICENSE").is_file():
        raise FileNotFoundError(f"{folder / 'LICENSE'} is missing: restore it from git")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="a new version to pin (needs --integrity)")
    parser.add_argument("--integrity", help="the registry's sha512 integrity for --version")
    args = parser.parse_args(argv)
    pin = json.loads((VENDOR / "VENDOR.json").read_text(encoding="utf-8"))
    if args.version:
        if not args.integrity:
            parser.error("--version needs --integrity (npm view @viz-js/viz@VERSION "
                         "dist.integrity)")
        pin = {**pin, "version": args.version, "integrity": args.integrity}
    record = refresh(pin)
    size = record["files"]["viz-global.js"]["bytes"]
    print(f"vendored {record['package']}@{record['version']} (Graphviz "
          f"{record['graphviz_version']}): viz-global.js, {size / 1e6:.2f} MB, sha256 "
          f"{record['files']['viz-global.js']['sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
