"""The service page's Versions tab in Chromium: the versions newest first with the current one
marked and no secret shown, Roll back on an older one (a new version, the old spec deployed),
and the API's refusal shown in the panel. Only the console and its API run here (Django's
live server on the test database); no worker acts on the changes, so none is needed."""

from __future__ import annotations

import copy

import pytest
from django.contrib.auth import get_user_model

from controlplane.services.models import Event, Service, ServiceVersion
from launcher.stack import ROOT
from tests.api_support import client_for, member
from tests.browser.chromium import require_browser, signed_in

SECRET = "SK-browser-secret"
SPEC = {
    "name": "versioned",
    "llm": {"engine": "vllm-cpu", "model": "/mnt/model"},
    "storage": [
        {
            "mount_path": "/mnt/model",
            "oss": {"path": "oss://bucket/m/", "access_key_id": "AK", "access_key_secret": SECRET},
        }
    ],
}
V2 = {**SPEC, "metadata": {"instance": 2}}
PASSWORD = "versions-test-password"
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
STATIC_FOR_SHOTS = ".deploy-bar, .preview { position: static !important; }"  # as conftest's


@pytest.fixture
def reconciles(monkeypatch) -> list[str]:
    """The services a write asked the workers to reconcile; none runs here."""
    from controlplane import intents

    asked: list[str] = []
    monkeypatch.setattr(intents, "reconcile_service", asked.append)
    return asked


@pytest.fixture
def page(live_server, transactional_db, monkeypatch):
    require_browser()
    # Playwright's sync API keeps its event loop set in this thread while the test runs, and
    # Django would take the test's own (synchronous) queries for calls from async code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    member(get_user_model().objects.create_user("versions-user", password=PASSWORD))
    with signed_in(live_server.url, "versions-user", PASSWORD) as page:
        yield page


def row(page, number: int):
    return page.locator(f'#svc-versions tr[data-version="{number}"]')


def test_versions_tab_lists_rolls_back_and_shows_refusals(live_server, page, reconciles):
    api = client_for("versions-api")
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    assert api.put("/api/v1/services/versioned", V2, format="json").status_code == 200

    page.goto(f"{live_server.url}/services/versioned/#versions")
    row(page, 2).locator(".badge:has-text('current')").wait_for()
    numbers = page.eval_on_selector_all(
        "#svc-versions tr[data-version]", "rs => rs.map(r => r.dataset.version)"
    )
    assert numbers == ["2", "1"]
    assert row(page, 2).locator("button").count() == 0  # no rollback to the current one
    assert "created" in row(page, 1).inner_text() and "updated" in row(page, 2).inner_text()
    assert SECRET not in page.content()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(
        path=str(SCREENSHOTS / "17-service-versions.png"), full_page=True, style=STATIC_FOR_SHOTS
    )

    # Roll back to version 1: confirmed, it becomes version 3, the current one.
    row(page, 1).locator("button:has-text('Roll back')").click()
    page.wait_for_selector("dialog[open] h2:has-text('to version 1?')")
    page.click("dialog button[data-role=ok]")
    row(page, 3).locator(".badge:has-text('current')").wait_for()
    assert "rollback to version 1" in row(page, 3).inner_text()
    assert row(page, 2).locator("button:has-text('Roll back')").count() == 1
    service = Service.objects.get(name="versioned")
    assert (service.plain_spec(), service.generation) == (SPEC, 3)  # its secret kept
    assert Event.objects.filter(service=service, reason="RolledBack").exists()
    assert reconciles.count("versioned") == 3  # create, update, rollback
    page.click("#svc-tabs [data-tab=overview]")
    page.wait_for_selector("#svc-summary dt:has-text('Version') + dd:text-is('3')")
    page.click("#svc-tabs [data-tab=versions]")

    # Version 2 saved under rules since tightened (the reserved port 8080): the API refuses,
    # and the panel says why, naming the field; nothing changes.
    old = copy.deepcopy(V2)
    old["containers"] = [{"port": 8080}]
    ServiceVersion.objects.filter(service=service, number=2).update(spec=old)
    row(page, 2).locator("button:has-text('Roll back')").click()
    page.click("dialog button[data-role=ok]")
    error = page.wait_for_selector("#versions-error:not([hidden])")
    assert "version 2" in error.inner_text().lower()
    assert "containers[0].port" in error.inner_text()
    assert ServiceVersion.objects.filter(service=service).count() == 3
    row(page, 3).locator(".badge:has-text('current')").wait_for()
    page.screenshot(
        path=str(SCREENSHOTS / "18-service-rollback-refused.png"),
        full_page=True,
        style=STATIC_FOR_SHOTS,
    )


def test_a_versions_hub_commits_are_shown(live_server, page, reconciles):
    api = client_for("versions-hub")
    spec = {"name": "hubbed", "llm": {"engine": "vllm-cpu", "model": "hf://org/model",
                                      "hub_token": "hf_versions_secret"}}  # fmt: skip
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    commit = "0123456789ab" + "c" * 28
    ServiceVersion.objects.filter(service__name="hubbed").update(
        hub_commits={"hf://org/model": commit}
    )
    page.goto(f"{live_server.url}/services/hubbed/#versions")
    row(page, 1).locator(".badge:has-text('current')").wait_for()
    shown = row(page, 1).locator(f"div[title='{commit}']")
    assert shown.inner_text() == "hf://org/model at 0123456789ab"
    assert "hf_versions_secret" not in page.content()
