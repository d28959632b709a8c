"""Fixtures for the rendering tests: one headless browser shared by the browser tests."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from report.browser import launch, missing


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's chromium through playwright; the test is skipped, with the reason, where
    chromium or playwright is missing."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    with launch() as running:
        yield running
