"""Playwright fixtures: Debian's chromium, launched headless; never a downloaded browser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One browser per test module (install it with `.ci/install-browser VENV`).

    Not per session: while Playwright runs, its event loop is current in this thread, and
    the test modules after the browser ones must not run under it.
    """
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="playwright is not installed: run `bash .ci/install-browser .venv`",
    )
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `bash .ci/install-browser .venv`.")
    # Playwright's sync API keeps its event loop current in this thread while it runs; the
    # tests' own ORM calls (and pytest-django's flush after each test) are still plain
    # synchronous code, so Django's async-safety check would be a false alarm here.
    with pytest.MonkeyPatch.context() as patch, sync_api.sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh browser page (own cookies) with a large viewport."""
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go (git-ignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
