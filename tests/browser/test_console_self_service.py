"""The console's self-service pages in Chromium: API keys, members and quotas, usage, the audit
trail and nodes, each as a role that may use it and as one that may not; what a page does not
offer, the API refuses. One Chromium for the module; each test signs its people in, in browser
contexts of their own. Only the console and its API run here (Django's live server on the test
database), as in test_console_workspaces."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone

from contracts.usage import SERVICE_TOKEN_ID
from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import Node
from controlplane.tokens.models import ApiKey
from controlplane.usage.models import UsageRecord
from controlplane.workspaces.models import Membership, Workspace
from tests.api_support import client_for, member, snapshot_store
from tests.browser.chromium import browser_context, require_browser
from tests.browser.conftest import SCREENSHOTS

PASSWORD = "self-service-test-password"
TEAM = "team"
# What the page may send back but the API refuses, from the console's own session.
CALL = """async ([method, url, body]) => {
    const csrf = JSON.parse(document.getElementById('console-config').textContent).csrfToken;
    const answer = await fetch(url, {method, body: body && JSON.stringify(body),
        headers: {'X-CSRFToken': csrf, 'Content-Type': 'application/json'}});
    return answer.status;
}"""


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    require_browser()
    # Playwright's event loop runs in the test thread for the whole module, so the database
    # flush after each test, too, happens "in an async context" (as test_versions explains).
    with pytest.MonkeyPatch.context() as patch, browser_context() as context:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield context.browser


class People:
    """Signs people in to the console, each in a browser context of their own, closed (and
    so its pages' polling stopped) when the test ends."""

    def __init__(self, chromium, url: str):
        self.chromium, self.url, self.contexts = chromium, url, []

    def open_as(self, username: str, path: str):
        """A page signed in as `username`, at `path`."""
        context = self.chromium.new_context(viewport={"width": 1440, "height": 900})
        self.contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{self.url}/login/?next={path}")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        with page.expect_navigation():
            page.click("button[type=submit]")
        return page


@pytest.fixture
def team(chromium, live_server, transactional_db, monkeypatch, settings, redis_url):
    """Workspace `team` with a service; people named for their role in it (and `ops`, staff;
    `nobody`, in no workspace)."""
    from controlplane import intents

    monkeypatch.setattr(intents, "reconcile_service", lambda name: None)  # no worker here
    snapshot_store(settings, redis_url)  # keys republish the routing snapshot here
    owner = client_for("boss", role="owner", workspace=TEAM)
    spec = {"name": "chat", "containers": [{"image": "busybox", "command": "true"}],
            "metadata": {"instance": 0}}  # fmt: skip
    assert owner.post("/api/v1/services", spec, format="json").status_code == 201
    users = get_user_model().objects
    for name, role in (("dev", "developer"), ("lead", "admin"), ("watcher", "viewer")):
        member(users.create_user(name, password=PASSWORD), role, TEAM)
    users.create_user("ops", password=PASSWORD, is_staff=True)
    users.create_user("nobody", password=PASSWORD)
    people = People(chromium, live_server.url)
    yield people
    for context in people.contexts:
        context.close()
    connections.close_all()  # see tests.browser.chromium.signed_in


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def nav(page) -> list[str]:
    return page.eval_on_selector_all(".topbar nav a", "links => links.map(a => a.textContent)")


def test_a_developer_makes_a_key_sees_it_once_and_revokes_it(team):
    page = team.open_as("dev", "/keys/")
    assert {"API keys", "Usage", "Members & quotas", "Audit", "Nodes"} <= set(nav(page))
    page.wait_for_selector("#key-fields [data-field=rpm] input[type=number]")
    fields = page.eval_on_selector_all(
        "#key-fields [data-field]", "found => found.map(n => n.dataset.field)"
    )
    assert fields == [
        "name",
        "services",
        "expires_at",
        "expires_in",
        "rpm",
        "tpm",
        "max_concurrency",
    ]  # the API schema's keys_create body, in its order
    names = page.wait_for_selector("[data-field=services] .scope-names").inner_text()
    assert names == "In this workspace: chat"
    page.fill("[name=name]", "ci")
    page.fill("[name=services]", "chat, nope")
    page.fill("[name=rpm]", "60")
    page.click("#key-submit")
    error = page.wait_for_selector("[data-field=services] .field-error")
    assert "no such service" in error.inner_text()
    assert not ApiKey.objects.exists()

    page.fill("[name=services]", "chat")
    page.fill("[name=expires_at]", "2030-01-31T12:00")  # the browser's local time
    page.click("#key-submit")
    shown = page.wait_for_selector("#new-key-value:not(:empty)").inner_text()
    key = ApiKey.objects.get(name="ci")
    assert (key.services, key.rpm, key.owner.username) == (["chat"], 60, "dev")
    offset = page.evaluate("() => new Date('2030-01-31T12:00').getTimezoneOffset()")
    expected = datetime(2030, 1, 31, 12, tzinfo=UTC) + timedelta(minutes=offset)
    assert key.expires_at == expected
    assert shown.startswith(key.hint) and len(shown) > len(key.hint)
    row = page.wait_for_selector(f"#keys tr[data-key={key.public_id}]")
    assert "60 req/min" in row.inner_text()
    shot(page, "self-service-keys")

    page.click(f"#keys tr[data-key={key.public_id}] [data-action=revoke]")
    page.click("#dialog [data-role=ok]")
    page.wait_for_selector(f"#keys tr[data-key={key.public_id}] .badge.revoked")
    key.refresh_from_db()
    assert key.revoked_at is not None
    page.reload()  # shown once: never again
    page.wait_for_selector(f"#keys tr[data-key={key.public_id}]")
    assert shown not in page.content()


def test_a_viewer_sees_keys_but_is_offered_no_key_form(team):
    ApiKey.issue(get_user_model().objects.get(username="dev"), Workspace.objects.get(name=TEAM),
                 "app")  # fmt: skip
    page = team.open_as("watcher", "/keys/")
    page.wait_for_selector("#keys tr[data-key] .badge.active")
    assert page.locator("#key-form").count() == 0
    assert page.locator("#keys [data-action=revoke]").count() == 0
    assert "needs the role developer" in page.inner_text("#keys-refused")
    assert page.evaluate(CALL, ["POST", "/api/v1/keys", {"name": "sneaky"}]) == 403
    assert not ApiKey.objects.filter(name="sneaky").exists()


def test_an_admin_adds_a_member_and_sets_a_quota(team):
    get_user_model().objects.create_user("newbie")
    page = team.open_as("lead", "/workspace/")
    page.wait_for_selector("#member-fields select[name=role]")
    offered = page.eval_on_selector_all(
        "#member-fields select[name=role] option", "found => found.map(o => o.value)"
    )
    assert offered == ["admin", "developer", "viewer"]  # owners are made by owners only
    page.fill("#member-fields [name=user]", "newbie")
    page.select_option("#member-fields select[name=role]", "viewer")
    page.click("#member-form button[type=submit]")
    page.wait_for_selector("#members tr[data-member=newbie]")
    assert Membership.objects.get(user__username="newbie").role == "viewer"
    assert page.locator("#members tr[data-member=boss] select").count() == 0  # an owner
    page.select_option("#members tr[data-member=watcher] select", "developer")
    page.wait_for_selector("#toast:has-text('watcher is now developer')")
    assert Membership.objects.get(user__username="watcher").role == "developer"
    page.click("#members tr[data-member=newbie] [data-action=remove]")
    page.click("#dialog [data-role=ok]")
    page.wait_for_selector("#members tr[data-member=newbie]", state="detached")
    assert not Membership.objects.filter(user__username="newbie").exists()

    assert page.locator("#quota-fields [name='ceilings.services']").count() == 0  # staff's
    Workspace.objects.filter(name=TEAM).update(ceiling_services=5)
    page.fill("#quota-fields [name='quotas.services']", "9")
    page.click("#quota-form button[type=submit]")
    error = page.wait_for_selector("#quota-fields [data-error-path='quotas.services']")
    assert "at most 5" in error.inner_text()
    page.fill("#quota-fields [name='quotas.services']", "3")
    page.click("#quota-form button[type=submit]")
    page.wait_for_function(
        "() => document.querySelector('#quotas tr[data-resource=services]').innerText.includes('3')"
    )
    assert Workspace.objects.get(name=TEAM).quota_services == 3
    shot(page, "self-service-workspace")


def test_a_viewer_sees_members_and_quotas_but_changes_nothing(team):
    page = team.open_as("watcher", "/workspace/")
    page.wait_for_selector("#members tr[data-member=dev]")
    page.wait_for_selector("#quotas tr[data-resource=services]")
    queued = page.inner_text("#quotas tr[data-resource='queued items']")
    assert "100000" in queued  # the platform's bound (WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE)
    assert page.locator("#member-form, #quota-form, #members select, #members button").count() == 0
    assert "needs the role admin" in page.inner_text("#members-refused")
    members = f"/api/v1/workspaces/{TEAM}/members"
    assert page.evaluate(CALL, ["POST", members, {"user": "ops", "role": "owner"}]) == 403
    assert page.evaluate(CALL, ["PATCH", f"/api/v1/workspaces/{TEAM}",
                                {"quotas": {"services": 0}}]) == 403  # fmt: skip


def test_usage_is_charted_by_service_and_key_and_exported_as_csv(team):
    workspace = Workspace.objects.get(name=TEAM)
    key = ApiKey.issue(get_user_model().objects.get(username="dev"), workspace, "app")[0]
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    for minute, key_id, requests in ((hour, key.public_id, 3), (hour, SERVICE_TOKEN_ID, 1)):
        UsageRecord.objects.create(
            minute=minute,
            service="chat",
            key_id=key_id,
            requests=requests,
            prompt_tokens=10,
            completion_tokens=5,
            workspace=workspace,
        )
    page = team.open_as("watcher", "/usage/")  # reading is every member's
    page.wait_for_selector("#chart-requests svg polyline")
    page.wait_for_selector(f"#usage-keys tr[data-key={key.public_id}]")
    assert "app (k" in page.inner_text(f"#usage-keys tr[data-key={key.public_id}]")
    assert "4" in page.inner_text("#usage-totals tr[data-service=chat]")
    shot(page, "self-service-usage")
    with page.expect_download() as download:
        page.click("#usage-csv")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0] == ("time,requests,prompt_tokens,completion_tokens,total_tokens,"
                        "avg_latency_ms,avg_ttft_ms")  # fmt: skip
    assert lines[1:] == [f"{hour:%Y-%m-%dT%H:00:00Z},4,20,10,30,0,0"]

    page.select_option("#usage-key", key.public_id)  # the API's own filter
    page.wait_for_function(
        "() => document.querySelectorAll('#usage-keys tr[data-key]').length === 1"
    )


def test_the_audit_trail_filters_by_actor_and_names_a_bad_filter(team):
    workspace = Workspace.objects.get(name=TEAM)
    for actor, action in (("dev", "POST /api/v1/keys"), ("lead", "DELETE /api/v1/keys/k1")):
        AuditEntry.objects.create(workspace=workspace, actor=actor, via="console", action=action,
                                  status=201)  # fmt: skip
    page = team.open_as("watcher", "/audit/")
    page.wait_for_selector("#audit tr[data-actor=lead]")
    page.fill("#audit-filters [name=actor]", "dev")
    page.click("#audit-filters button[type=submit]")
    page.wait_for_function("() => !document.querySelector('#audit tr[data-actor=lead]')")
    assert "POST /api/v1/keys" in page.inner_text("#audit tr[data-actor=dev]")
    shot(page, "self-service-audit")
    page.fill("#audit-filters [name=limit]", "5000")
    page.click("#audit-filters button[type=submit]")
    assert "1 to 1000" in page.inner_text("[data-error-path=limit]")


def test_nodes_offer_cordon_and_drain_to_staff_only(team):
    Node.objects.create(name="gpu-1", address="10.0.0.1", heartbeat_at=timezone.now(),
                        cards=[{"kind": "gpu", "index": 0}], images=["vllm:1"])  # fmt: skip
    staff = team.open_as("ops", "/nodes/")
    staff.wait_for_selector("#nodes tr[data-node=gpu-1] button:has-text('Drain')")
    staff.click("#nodes tr[data-node=gpu-1] summary")
    assert "GPU 0: free" in staff.inner_text("#nodes tr[data-node=gpu-1] details")
    assert "vllm:1" in staff.inner_text("#nodes tr[data-node=gpu-1] details")
    shot(staff, "self-service-nodes")
    dev = team.open_as("dev", "/nodes/")
    dev.wait_for_selector("#nodes tr[data-node=gpu-1]")
    assert dev.locator("#nodes button").count() == 0
    assert dev.evaluate(CALL, ["POST", "/api/v1/nodes/gpu-1/cordon", None]) == 403


def test_someone_in_no_workspace_gets_no_self_service_page(team):
    page = team.open_as("nobody", "/keys/")
    for path in ("/keys/", "/workspace/", "/usage/", "/audit/"):
        answer = page.goto(team.url + path)
        assert answer.status == 403 and "not a member" in page.inner_text("main")
