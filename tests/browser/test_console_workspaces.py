"""Workspaces in the console, in Chromium: a user who develops in one workspace and only views
another sees each one's services alone, switches between them, and is offered no deploy,
change or roll-back in the one they only view; the API refuses what the page does not offer.
Only the console and its API run here (Django's live server on the test database)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from controlplane.services.models import Service
from tests.api_support import client_for, member
from tests.browser.chromium import require_browser, signed_in

PASSWORD = "workspaces-test-password"


def spec(name: str) -> dict:
    return {"name": name, "containers": [{"image": "busybox", "command": "true"}],
            "metadata": {"instance": 0}}  # fmt: skip


@pytest.fixture
def page(live_server, transactional_db, monkeypatch):
    require_browser()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as test_versions explains
    from controlplane import intents

    monkeypatch.setattr(intents, "reconcile_service", lambda name: None)  # no worker here
    user = get_user_model().objects.create_user("two-hats", password=PASSWORD)
    member(user, "developer", "ml")
    member(user, "viewer", "web")
    for workspace in ("ml", "web"):
        api = client_for(f"{workspace}-owner", role="owner", workspace=workspace)
        assert (
            api.post("/api/v1/services", spec(f"{workspace}-svc"), format="json").status_code == 201
        )
    with signed_in(live_server.url, "two-hats", PASSWORD) as page:
        yield page


def listed(page) -> list[str]:
    page.wait_for_selector("#services a[href^='/services/']")
    return page.eval_on_selector_all(
        "#services a[href^='/services/']", "links => links.map(a => a.textContent.trim())"
    )


def test_each_workspace_shows_its_own_services_and_what_the_role_allows(live_server, page):
    assert page.input_value("#workspace-switch") == "ml"  # the first of the user's
    assert listed(page) == ["ml-svc"]
    assert page.locator("a:has-text('Deploy service')").count() == 1
    page.goto(f"{live_server.url}/services/ml-svc/")
    page.wait_for_selector("#svc-actions button[data-action=stop]")
    assert page.goto(f"{live_server.url}/services/web-svc/").status == 404

    page.goto(live_server.url + "/")
    with page.expect_navigation():
        page.select_option("#workspace-switch", "web")
    assert listed(page) == ["web-svc"]
    assert page.locator("a:has-text('Deploy service')").count() == 0
    page.goto(f"{live_server.url}/services/web-svc/")
    page.wait_for_selector("h1:has-text('web-svc')")
    assert page.locator("#svc-actions").count() == 0  # no start, stop, scale, edit or delete
    page.goto(f"{live_server.url}/deploy/")
    assert "needs the role developer" in page.inner_text("#deploy-refused")

    # What the page does not offer, the API refuses: the console's own session, a viewer.
    status = page.evaluate("""async () => {
        const csrf = JSON.parse(document.getElementById('console-config').textContent).csrfToken;
        const answer = await fetch('/api/v1/services/web-svc/stop',
            {method: 'POST', headers: {'X-CSRFToken': csrf}});
        return answer.status;
    }""")
    assert status == 403
    assert Service.objects.get(name="web-svc").desired_state == "running"
