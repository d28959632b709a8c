"""Headless Chromium for browser tests: Debian's chromium driven by playwright, never a download."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

__all__ = ["CHROMIUM_ARGS", "BrowserPage", "chromium_path", "missing", "launch", "open_page"]

#: Flags for a quiet, offline, container-friendly headless run.
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync")


def chromium_path() -> Optional[str]:
    """The chromium to drive: ``$TORCHGRAPHREC_CHROMIUM`` if set, else ``chromium`` (or
    ``chromium-browser``) on PATH; ``None`` when there is none."""
    chosen = os.environ.get("TORCHGRAPHREC_CHROMIUM")
    if chosen:
        return chosen if Path(chosen).is_file() else shutil.which(chosen)
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing() -> Optional[str]:
    """Why no browser test can run here, or ``None`` when one can."""
    if chromium_path() is None:
        return "chromium is not installed (apt-get install chromium, as .ci/run does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; no browser download)"
    return None


@contextmanager
def launch() -> Iterator[Any]:
    """A headless chromium (a playwright ``Browser``), closed on exit.

    Raises ``RuntimeError`` naming the reason when :func:`missing` finds one; tests get a
    skip from the ``browser`` fixture instead."""
    reason = missing()
    if reason is not None:
        raise RuntimeError(f"no browser here: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium_path(),
                                         args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class BrowserPage:
    """A loaded page, the problems it reported (console errors, uncaught exceptions) and
    the URL of every request it made (a self-contained report makes none but its own)."""

    page: Any
    problems: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@contextmanager
def open_page(browser: Any, path: Path, width: int = 1280, height: int = 900,
              suffix: str = "") -> Iterator[BrowserPage]:
    """``path`` loaded from ``file://`` (``suffix``: a fragment, ``#...``) in a fresh page,
    errors collected; closed on exit."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    loaded = BrowserPage(page)
    page.on("console", lambda m: loaded.problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: loaded.problems.append(str(e)))
    page.on("request", lambda r: loaded.requests.append(r.url))
    try:
        page.goto(Path(path).resolve().as_uri() + suffix)
        yield loaded
    finally:
        context.close()
