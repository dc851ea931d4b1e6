"""Debian's Chromium for the console tests, driven by Playwright, and the console's code
editor (Monaco, from npm).

Playwright's own browser download does not work on these machines, so the system's
/usr/bin/chromium is used (.ci/run installs it); without it the tests skip, except in CI. The
same goes for Monaco, which `npm ci` in frontend/ installs into the console's static files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("WHARF_TEST_CHROMIUM", "/usr/bin/chromium")
FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
MONACO_LOADER = FRONTEND / "static" / "frontend" / "vendor" / "monaco" / "vs" / "loader.js"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


def require_browser() -> None:
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (requirements-dev.txt)")
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    if missing:
        _missing("no browser for the console tests: " + ", ".join(missing))


def require_editor() -> None:
    """Monaco's files, which the JSON editor tests drive."""
    if not MONACO_LOADER.exists():
        _missing(f"no code editor for the console tests: run `npm ci` in {FRONTEND}")


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message + "; .ci/run should have installed it")
    pytest.skip(message)


@contextmanager
def browser_context() -> Iterator[object]:
    """A fresh Chromium and a browser context (playwright's BrowserContext) in it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        try:
            yield context
        finally:
            context.close()
            browser.close()


@contextmanager
def signed_in(url: str, username: str, password: str) -> Iterator[object]:
    """A page of a fresh Chromium signed in to the console at `url` as `username`, on the
    Services page. Afterwards the test thread's database connections are closed: queries made
    while Playwright's event loop is set get connections of their own, which would keep the
    test database from being dropped."""
    from django.db import connections

    with browser_context() as context:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(url + "/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_selector("h1:has-text('Services')")
        yield page
        connections.close_all()
