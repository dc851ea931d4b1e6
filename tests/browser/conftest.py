"""The console in a real browser: the whole system (tests/system.py) on the process runtime,
a Django user to sign in as, and Debian's Chromium driven by Playwright
(tests/browser/chromium.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from controlplane.services.tiny_model import write_tiny_model
from launcher.stack import ROOT
from tests.browser.chromium import browser_context, require_browser, require_editor
from tests.system import System, start_system

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
STATIC_FOR_SHOTS = ".deploy-bar, .preview { position: static !important; }"
USERNAME = "console-admin"
PASSWORD = "wharf-console-test-password"
# The console stack's own Redis database number and PostgreSQL database (beside DATABASE_URL's),
# so that it never shares them with another suite's stack; suites run side by side choose
# others with these variables.
REDIS_NUMBER = int(os.environ.get("WHARF_TEST_CONSOLE_REDIS_DB", "10"))
DATABASE = os.environ.get("WHARF_TEST_CONSOLE_DATABASE", "wharf_e2e_console")


@dataclass
class Console:
    """The running system and a signed-in browser on its console."""

    system: System
    context: object  # playwright BrowserContext
    url: str
    username: str = USERNAME
    password: str = PASSWORD

    def page(self):
        page = self.context.new_page()
        page.set_default_timeout(30_000)
        return page

    def shot(self, page, name: str, full_page: bool = True) -> None:
        """The page as a PNG; a modal dialog's backdrop covers only the viewport, so dialogs
        are taken with full_page=False."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        # Sticky bars would be drawn mid-page in a full-page capture; lay them out in flow.
        page.screenshot(
            path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page, style=STATIC_FOR_SHOTS
        )


@pytest.fixture(scope="module")
def console_system(tmp_path_factory, redis_url) -> Iterator[System]:
    require_browser()
    require_editor()
    models = tmp_path_factory.mktemp("console-models")
    write_tiny_model(models / "tiny-llama")
    home = tmp_path_factory.mktemp("wharf-console")
    # Its Redis database is emptied first, as its PostgreSQL database is made anew, so that no
    # earlier run's snapshot or queued task leaks in.
    # The free-edit and JSON-editor tests run their own commands on the process runtime: staff
    # grant that to the workspace, as an operator would (contracts.grants' process_code).
    system = start_system(
        "process",
        home,
        models,
        redis_url,
        {},
        redis_number=REDIS_NUMBER,
        database=DATABASE,
        grants={"process_code": True},
    )
    env = {**system.stack.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "createsuperuser", "--noinput",
         "--username", USERNAME, "--email", "console@example.com"],
        env=env, check=True, cwd=ROOT, capture_output=True,
    )  # fmt: skip
    yield system
    _delete_leftovers(system)
    system.remove_instances()  # whatever the worker did not get to
    system.stack.stop()


def _delete_leftovers(system: System, timeout: float = 90) -> None:
    """Delete the services a failed test left behind, through the API, and wait.

    Removing their instances behind the running worker's back is not enough: the reconciler
    would start replacements that outlive the stack.
    """
    with system.api() as api:
        names = [service["name"] for service in api.get("/services").json()]
        for name in names:
            api.delete(f"/services/{name}")
        deadline = time.monotonic() + timeout
        # A service being deleted is shown until its last instance has stopped: 404 is gone.
        while names and time.monotonic() < deadline:
            names = [n for n in names if api.get(f"/services/{n}").status_code != 404]
            time.sleep(1)


@pytest.fixture(scope="module")
def console(console_system) -> Iterator[Console]:
    with browser_context() as context:
        yield Console(console_system, context, console_system.stack.api_url)
