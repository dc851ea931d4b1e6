"""The service page's Release tab in Chromium: a developer starts a canary from the page (its
spec in the JSON editor, the steps and bounds in the form; the Canary row checked), watches a
running one's figures side by side, pauses and aborts it; a bad steps value shows the API's
error by its field and starts nothing; the mirror is set and stopped from the page with the
figures beside each target's copies; a viewer sees all of it and no control.

Only the console and its API run here (Django's live server on the test database). The
canary's instances run on the in-memory fleet (tests/fleet_support.py), the canary controller
is a pass of workers.scheduling.canaries.advance_all, and the gateways' figures are written to a
real Redis as gateways write them (contracts.call_figures), as in tests/test_canary_fleet.py; the
page reads all of it through the real API."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from contracts.call_figures import MIRROR, PREFIX, Figures, key, slot
from contracts.canary import CANARY_TRACK
from controlplane.services.models import Canary, Service
from launcher.stack import ROOT
from tests.api_support import client_for, member
from tests.browser.chromium import require_browser, signed_in
from tests.browser.deploy_page import EDITOR_MODEL
from tests.test_fleet import custom, deploy
from workers.scheduling import canaries

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
PASSWORD = "release-test-password"
NAME, OTHER = "web", "web-next"
LIVE = pytest.mark.django_db(transaction=True)
TEXT_AREA = "document.querySelector('#canary-spec')"  # the editor without Monaco


def version_two() -> dict:
    spec = custom(NAME, instances=2)
    spec["containers"][0]["env"] = [{"name": "V", "value": "2"}]
    return spec


def measured(store, service: str, track: str, calls: int, errors: int = 0, ttft: float = 100):
    """What the gateways would have counted of `calls` calls to (service, track) just now."""
    figures = Figures()
    for index in range(calls):
        figures.add(500 if index < errors else 200, False, ttft, 20)
    at = timezone.now().timestamp()
    for field, amount in figures.fields().items():
        store.hincrby(key(service, track, slot(at)), field, amount)


def forget_figures(store) -> None:
    for service in (NAME, OTHER):
        for found in store.scan_iter(f"{PREFIX}{service}:*"):
            store.delete(found)


@pytest.fixture
def fleet(live_server, store, monkeypatch):
    """NAME with two ready instances on the in-memory fleet, and OTHER (no instance) beside
    it in the same workspace; no figures in Redis yet."""
    require_browser()
    # Playwright's sync API keeps its event loop set in this thread (as test_versions says).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from controlplane import intents
    from tests.fleet_support import Fleet

    monkeypatch.setattr(intents, "reconcile_service", lambda name: None)  # the fleet's passes do
    forget_figures(store)
    fleet = Fleet()
    fleet.node("a")
    deploy(custom(NAME, instances=2))
    deploy(custom(OTHER, instances=0))
    fleet.settle()
    yield fleet
    forget_figures(store)


def open_release(live_server, role: str):
    """A browser signed in as a new user with `role` in the default workspace."""
    user = get_user_model().objects.create_user(role, password=PASSWORD)
    member(user, role)
    return signed_in(live_server.url, role, PASSWORD)


def goto_release(page, live_server, editor: bool = True) -> None:
    page.goto(f"{live_server.url}/services/{NAME}/#release")
    if editor:  # a writer's: the JSON editor up and holding the service's spec
        page.wait_for_selector("body[data-release-ready]")


def set_spec(page, spec: dict) -> None:
    """The JSON editor's text, on Monaco or the plain text area it falls back to."""
    text = json.dumps(spec, indent=2)
    if page.get_attribute("body", "data-release-ready") == "monaco":
        page.evaluate(f"(text) => {EDITOR_MODEL}.setValue(text)", text)
    else:
        page.fill("#canary-spec", text)


def cell(figure: str, side: str, table: str = "#canary-figures") -> str:
    return f'{table} tr[data-figure="{figure}"] td[data-side="{side}"]'


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@LIVE
def test_a_developer_starts_watches_pauses_and_aborts_a_canary(live_server, fleet, store):
    with open_release(live_server, "developer") as page:
        script_errors: list[str] = []
        page.on("pageerror", lambda error: script_errors.append(str(error)))
        goto_release(page, live_server)
        page.wait_for_selector("#canary-none:has-text('No canary release yet')")
        editor_text = f"() => window.monaco ? {EDITOR_MODEL}.getValue() : {TEXT_AREA}.value"
        prefilled = json.loads(page.evaluate(editor_text))
        assert prefilled == custom(NAME, instances=2)  # the service's spec, to edit
        assert page.input_value("input[name=steps]") == "10, 50, 100"  # the API's defaults
        assert page.input_value("input[name=interval_s]") == "60"

        # The service's own spec releases nothing; steps that fall are refused by name.
        page.fill("input[name=steps]", "50, 10, 100")
        page.click("#canary-start")
        error = page.wait_for_selector('#canary-form .field-error[data-error-path="steps"]')
        assert "rising" in error.inner_text()
        shot(page, "42-service-release-refused")
        assert page.is_hidden("#canary-form-error")  # all said at the field
        page.fill("input[name=steps]", "10, 50, 100")
        page.click("#canary-start")
        page.wait_for_selector('#canary-spec-errors li[data-path="spec"]:has-text("nothing to")')
        assert page.is_hidden('#canary-form .field-error[data-error-path="steps"]')
        assert not Canary.objects.exists()

        set_spec(page, version_two())
        page.fill("input[name=interval_s]", "10")
        page.fill("input[name=min_requests]", "20")
        page.click("#canary-start")
        page.wait_for_selector("#canary-state .badge:text-is('starting')")
        release = Canary.objects.get()
        assert (release.state, release.steps, release.interval_s, release.min_requests) == (
            "starting", [10, 50, 100], 10, 20)  # fmt: skip
        assert (release.max_error_rate, release.max_ttft_ratio) == (0.01, 1.5)  # defaults
        assert release.spec == version_two() and release.actor == "developer"
        assert page.is_hidden("#canary-form")  # one release at a time

        # Its instances come up; the controller lets it take 10 %, then judges the figures.
        fleet.settle()
        canaries.advance_all(timezone.now())
        measured(store, NAME, CANARY_TRACK, 30)
        measured(store, NAME, "", 270)
        canaries.advance_all(timezone.now() + timedelta(seconds=2))  # measuring: it holds
        page.wait_for_selector(f"{cell('requests', 'canary')}:text-is('30')")
        assert page.inner_text(cell("requests", "stable")) == "270"
        assert page.inner_text(cell("error_rate", "canary")) == "0.00%"
        assert page.inner_text("#canary-state") == "running"
        assert page.inner_text("#canary-weight").startswith("10%")
        assert page.inner_text("#canary-steps li.current") == "10%"
        assert "measuring" in page.inner_text("#canary-message")
        assert page.is_hidden("[data-canary-action=resume]")
        shot(page, "40-service-release-canary")

        page.click("[data-canary-action=pause]")
        page.wait_for_selector("#canary-state .badge:text-is('paused')")
        assert Canary.objects.get().state == "paused"
        assert page.is_visible("[data-canary-action=resume]")
        assert page.is_hidden("[data-canary-action=pause]")

        page.click("[data-canary-action=abort]")
        page.wait_for_selector("dialog[open] h2:has-text('Abort the canary?')")
        page.click("dialog button[data-role=ok]")
        page.wait_for_selector("#canary-state .badge:text-is('aborted')")
        assert Canary.objects.get().state == "aborted"
        assert page.is_visible("#canary-form")  # another may start
        assert page.locator("[data-canary-action]:visible").count() == 0
        assert page.inner_text("#canary-steps li.stopped-at") == "10%"
        assert script_errors == []


@LIVE
def test_a_developer_sets_and_stops_the_mirror(live_server, fleet, store):
    with open_release(live_server, "developer") as page:
        goto_release(page, live_server)
        page.wait_for_selector("[data-mirror=mirror]:has-text('off')")
        page.click("#mirror-set")  # no target ticked, no ratio: both named
        page.wait_for_selector('#mirror-form .field-error[data-error-path="targets"]:visible')
        assert page.is_visible('#mirror-form .field-error[data-error-path="ratio"]')
        measured(store, NAME, "", 40, errors=2)  # its own calls, and the copies OTHER answered
        measured(store, OTHER, MIRROR, 10, errors=1)
        page.check(f"#mirror-choices input[value={OTHER}]")
        page.fill("#mirror-form input[name=ratio]", "25")
        page.click("#mirror-set")
        page.wait_for_selector(f"[data-mirror=targets]:text-is('{OTHER}')")
        assert Service.objects.get(name=NAME).mirror == {"targets": [OTHER], "ratio": 25}
        assert page.is_hidden('#mirror-form .field-error[data-error-path="ratio"]')
        page.wait_for_selector(f"{cell('requests', OTHER, '#mirror-figures')}:text-is('10')")
        assert page.inner_text(cell("requests", NAME, "#mirror-figures")) == "40"
        assert page.inner_text(cell("error_rate", OTHER, "#mirror-figures")) == "10.00%"

        page.click("#mirror-stop")
        page.wait_for_selector("[data-mirror=mirror]:has-text('off')")
        assert Service.objects.get(name=NAME).mirror == {}


@LIVE
def test_a_viewer_sees_the_release_and_no_control(live_server, fleet, store):
    developer = client_for("release-dev")
    body = {"spec": version_two(), "interval_s": 10, "min_requests": 20}
    assert developer.post(f"/api/v1/services/{NAME}/canary", body, format="json").status_code == 201
    mirror = {"targets": [OTHER], "ratio": 10}
    changed = developer.put(f"/api/v1/services/{NAME}/mirror", mirror, format="json")
    assert changed.status_code == 200
    fleet.settle()
    canaries.advance_all(timezone.now())
    measured(store, NAME, CANARY_TRACK, 12)
    measured(store, NAME, "", 88)
    canaries.advance_all(timezone.now() + timedelta(seconds=1))

    with open_release(live_server, "viewer") as page:
        goto_release(page, live_server, editor=False)
        page.wait_for_selector(f"{cell('requests', 'canary')}:text-is('12')")
        assert page.inner_text("#canary-state") == "running"
        assert page.inner_text("[data-mirror=targets]") == OTHER
        panel = page.locator("section[data-panel=release]")
        assert panel.locator(":is(input, select, button, textarea)").count() == 0
        assert page.get_attribute("body", "data-release-ready") is None  # no editor opened
        shot(page, "41-service-release-viewer")


@LIVE
def test_the_online_test_still_refuses_parameters_that_are_no_object(live_server, fleet):
    """The online test moved out of service.js (to online_test.js) for the Release tab's room:
    it is still wired to its form."""
    with open_release(live_server, "developer") as page:
        page.goto(f"{live_server.url}/services/{NAME}/#test")
        page.fill("#test-form textarea[name=extra]", "[1]")
        page.click("#test-send")
        page.wait_for_selector("#test-meta .field-error:has-text('must be a JSON object')")
