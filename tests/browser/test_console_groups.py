"""The console's Groups page in Chromium: a developer releases a group's second member and
switches all the traffic to it with one "Apply weights" (one PATCH); a weight the API refuses
shows its error by the member's field and changes nothing; a viewer sees the group and is
offered no control. The API's state (the database and the routing snapshot the gateways read,
in a real Redis) is checked after each change. Only the console and its API run here (Django's
live server on the test database), as in test_console_workspaces.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from controlplane.services.models import Service, ServiceGroup
from launcher.stack import ROOT
from tests.api_support import client_for, member, published
from tests.browser.chromium import require_browser, signed_in

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
PASSWORD = "groups-test-password"
WORKSPACE, GROUP, FIRST, SECOND = "ml", "g", "g-blue", "g-green"
LIVE = pytest.mark.django_db(transaction=True)


def spec(name: str) -> dict:
    """A member no engine has to serve: nothing runs it here."""
    return {"name": name, "containers": [{"image": "busybox", "command": "true"}],
            "metadata": {"instance": 0, "group": GROUP}}  # fmt: skip


@pytest.fixture
def group(live_server, store, monkeypatch):
    """Group GROUP in WORKSPACE: FIRST released into it (its first member), SECOND standalone."""
    require_browser()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as test_versions explains
    from controlplane import intents

    monkeypatch.setattr(intents, "reconcile_service", lambda name: None)  # no worker here
    owner = client_for("ml-owner", role="owner", workspace=WORKSPACE)
    for name in (FIRST, SECOND):
        assert owner.post("/api/v1/services", spec(name), format="json").status_code == 201
    return store


def open_groups(live_server, role: str):
    """The Groups page, signed in as a user with `role` in WORKSPACE."""
    user = get_user_model().objects.create_user(role, password=PASSWORD)
    member(user, role, WORKSPACE)
    return signed_in(live_server.url, role, PASSWORD)


def row(name: str) -> str:
    return f"[data-group={GROUP}] tr[data-member={name}]"


def weight_error(name: str) -> str:
    return f'{row(name)} .field-error[data-error-path="weights.{name}"]'


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def state(name: str) -> tuple[str, int]:
    service = Service.objects.get(name=name)
    return service.traffic_state, service.group_weight


def routed(store) -> dict[str, int]:
    return {m.service: m.weight for m in published(store).groups[GROUP].members}


@LIVE
def test_a_developer_releases_a_member_and_switches_the_traffic_in_one_apply(live_server, group):
    with open_groups(live_server, "developer") as page:
        page.click("nav a:has-text('Groups')")
        page.wait_for_selector(f"{row(SECOND)} .badge:text-is('standalone')")
        card = page.locator(f"[data-group={GROUP}]")
        assert card.locator("select[name=traffic_mode]").input_value() == "auto"
        assert card.locator(".endpoint").first.inner_text().endswith(f"/api/predict/{GROUP}")
        assert page.inner_text(f"{row(FIRST)} .share-text") == "100%"

        page.click(f"{row(SECOND)} button[data-action=release]")
        page.wait_for_selector(f"{row(SECOND)} .badge:text-is('grouping')")
        assert state(SECOND) == ("grouping", 100)
        assert routed(group) == {FIRST: 100, SECOND: 100}
        assert page.inner_text(f"{row(SECOND)} .share-text") == "50%"  # auto, none ready

        patches = []
        page.on("request", lambda r: r.method == "PATCH" and patches.append(r.post_data_json))
        page.fill(f"{row(FIRST)} input.weight", "0")
        page.fill(f"{row(SECOND)} input.weight", "100")
        page.click("[data-action=apply-weights]")
        page.wait_for_selector(f"{row(SECOND)} .share-text:text-is('100%')")
        assert patches == [{"weights": {FIRST: 0, SECOND: 100}}]  # blue-green: one call
        assert card.locator("select[name=traffic_mode]").input_value() == "customized"
        assert (state(FIRST), state(SECOND)) == (("grouping", 0), ("grouping", 100))
        assert ServiceGroup.objects.get(name=GROUP).traffic_mode == "customized"
        assert routed(group) == {FIRST: 0, SECOND: 100}
        shot(page, "30-groups")

        # The service page names its group, linked to the group's card.
        page.click(f"{row(SECOND)} a.name")
        page.wait_for_selector("#svc-group .badge:text-is('grouping')")
        assert "weight 100" in page.inner_text("#svc-group")
        page.click(f"#svc-group a:text-is('{GROUP}')")
        page.wait_for_selector(f"#group-{GROUP}")
        assert page.url.endswith(f"/groups/#group-{GROUP}")


@LIVE
def test_a_refused_change_shows_the_apis_error_by_its_field_and_changes_nothing(live_server, group):
    with open_groups(live_server, "developer") as page:
        page.goto(live_server.url + "/groups/")
        page.fill(f"{row(FIRST)} input.weight", "1001")
        page.click("[data-action=apply-weights]")
        error = page.wait_for_selector(weight_error(FIRST))
        assert "less than or equal to 1000" in error.inner_text()
        assert page.is_hidden(weight_error(SECOND))
        assert page.is_hidden(f"[data-group={GROUP}] .alert.error")  # all said at the field
        assert (state(FIRST), state(SECOND)) == (("grouping", 100), ("standalone", 100))
        assert ServiceGroup.objects.get(name=GROUP).traffic_mode == "auto"
        page.wait_for_timeout(3500)  # a refresh keeps what was typed, and the error
        assert page.input_value(f"{row(FIRST)} input.weight") == "1001"
        assert page.is_visible(weight_error(FIRST))
        shot(page, "31-groups-weight-error")

        page.fill("input[name=session_header]", "X Chat")
        page.click("[data-action=session-header]")
        error = page.wait_for_selector('.field-error[data-error-path="session_header"]')
        assert error.inner_text()
        assert ServiceGroup.objects.get(name=GROUP).session_header == ""
        page.fill("input[name=session_header]", "X-Chat-Id")
        page.click("[data-action=session-header]")
        page.wait_for_selector('.field-error[data-error-path="session_header"]', state="hidden")
        assert ServiceGroup.objects.get(name=GROUP).session_header == "x-chat-id"
        assert published(group).groups[GROUP].session_headers[0] == "x-chat-id"


@LIVE
def test_a_viewer_sees_the_group_and_no_control(live_server, group):
    with open_groups(live_server, "viewer") as page:
        page.goto(live_server.url + "/groups/")
        page.wait_for_selector(f"{row(SECOND)} .badge:text-is('standalone')")
        card = f"[data-group={GROUP}]"
        assert page.inner_text(f"{card} .group-mode") == "auto"
        assert page.inner_text(f"{row(FIRST)} .weight") == "100"
        assert page.inner_text(f"{row(FIRST)} .share-text") == "100%"
        assert page.locator(f"{card} :is(input, select, button, textarea):enabled").count() == 0
