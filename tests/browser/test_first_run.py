"""The newcomer's path, end to end: the README's `make run` (`manage.py up`) in a fresh
WHARF_HOME with no WHARF_* variables, on the default ports. Its printout is the README's first
screen; the password it prints signs in to the console, which shows the demo running; the curl
it prints gets a completion; SIGTERM to make's process group leaves nothing running, the
demo's engine included. A later run keeps the password; WHARF_ADMIN_PASSWORD, when set, is the
password."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from launcher.stack import ROOT, port_taken
from tests.browser.chromium import browser_context, require_browser
from tests.up_support import (
    DEMO_STOP_LIMIT,
    Up,
    assert_stopped,
    end_everything,
    newcomer_env,
    wait_gone,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

API, GATEWAY = 8000, 9000
CONSOLE = f"http://127.0.0.1:{API}"


def readme_first_screen() -> re.Pattern:
    """The block the README says `make run` prints, with each `…` standing for what differs
    from run to run (password, tokens)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("and prints:\n\n```\n", 1)[1].split("```", 1)[0].rstrip("\n")
    return re.compile(r"\S+?".join(re.escape(part) for part in block.split("…")))


def sign_in(context, password: str):
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(CONSOLE + "/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Services'), .alert.error")
    assert not page.query_selector(".alert.error"), f"password {password!r} did not sign in"
    return page


UP = r"^Press Ctrl-C to stop\.$"


def run_up(env: dict[str, str], *args: str) -> Up:
    up = Up(env, *args)
    up.wait_for(UP, timeout=900)
    return up


def stop_and_check(up: Up) -> None:
    assert up.stop() == 0, up.output
    assert "Traceback" not in up.output
    assert wait_gone(up.home, ports=(API, GATEWAY), services=("demo",)) == []


@pytest.fixture
def default_ports_free():
    require_browser()
    taken = [port for port in (API, GATEWAY) if port_taken(port)]
    if taken:
        pytest.fail(f"ports {taken} are taken on this machine; the newcomer's path needs them")


def test_a_newcomers_first_run_signs_in_and_serves_the_demo(tmp_path, default_ports_free):
    """The README's own command, `make run`; a service manager's SIGTERM to its process group
    once the demo serves stops the demo's engine too."""
    home = tmp_path / "wharf"
    up = Up.make_run(newcomer_env(home))
    up.ports = (API, GATEWAY)
    stopped = False
    try:
        up.wait_for(UP, timeout=900)
        screen = readme_first_screen().search(up.output)
        assert screen, f"the README's first screen is not what make run printed:\n{up.output}"
        password = re.search(r"\(user admin, password (\S+)\)", screen[0])[1]
        token = re.search(r"Demo token   (wsk-\S+)", screen[0])[1]
        curl = screen[0].split("Call the demo model:\n", 1)[1].split("\n\nPress", 1)[0]

        with browser_context() as context:
            page = sign_in(context, password)
            row = page.wait_for_selector("#services tbody tr:has-text('demo')")
            assert row.query_selector("td.phase .badge").inner_text() == "running"
        assert token in curl
        answer = subprocess.run(["bash", "-c", curl.replace("\\\n", " ")], capture_output=True,
                                text=True, timeout=120)  # fmt: skip
        completion = json.loads(answer.stdout)
        assert completion["choices"][0]["text"], answer.stdout
        assert completion["usage"]["completion_tokens"] > 0

        signalled_at = time.monotonic()
        up.signal_group(signal.SIGTERM)
        stopped = True
        assert_stopped(up, signalled_at, DEMO_STOP_LIMIT, services=("demo",))
    finally:
        if not stopped:
            up.signal_group(signal.SIGKILL)
            end_everything(home, services=("demo",))

    # A later run keeps the password, does not print it, and says how to reset it.
    again = run_up(newcomer_env(home), "--no-demo")
    try:
        assert password not in again.output
        assert "password as first printed; reset it: " in again.output
        assert "manage.py changepassword admin" in again.output
        with browser_context() as context:
            sign_in(context, password)
    finally:
        stop_and_check(again)


def test_the_admin_password_from_the_environment_signs_in(tmp_path, default_ports_free):
    chosen = "a-password-chosen-by-the-operator"
    up = run_up(newcomer_env(tmp_path, WHARF_ADMIN_PASSWORD=chosen), "--no-demo")
    try:
        assert "(user admin, password from WHARF_ADMIN_PASSWORD)" in up.output
        assert chosen not in up.output
        with browser_context() as context:
            sign_in(context, chosen)
    finally:
        stop_and_check(up)
