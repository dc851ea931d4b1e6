"""The service page's Adapters tab in Chromium: each adapter with where it is loaded (loaded,
loading, failed with why), its calls and tokens of the last day; adding one (a new version)
and removing one; the API's refusal shown naming the field; and the online test offering each
adapter as a model. Only the console and its API run here (Django's live server on the test
database); the instances' states are written as a node's agent writes them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from controlplane.usage.models import UsageRecord
from launcher.stack import ROOT
from tests.api_support import client_for, member
from tests.browser.chromium import require_browser, signed_in

SPEC = {
    "name": "tuned",
    "llm": {"engine": "vllm-cpu", "model": "tiny",
            "lora": {"adapters": [{"name": "sql", "model": "tiny-sql"},
                                  {"name": "chat", "model": "tiny-chat"}]}},
}  # fmt: skip
PASSWORD = "adapters-test-password"
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"


@pytest.fixture
def page(live_server, transactional_db, monkeypatch):
    require_browser()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as tests/browser/test_versions
    from controlplane import intents

    monkeypatch.setattr(intents, "reconcile_service", lambda name: None)  # no worker here
    member(get_user_model().objects.create_user("adapters-user", password=PASSWORD))
    with signed_in(live_server.url, "adapters-user", PASSWORD) as page:
        yield page


def states(page, adapter: str) -> str:
    return page.locator(f'#svc-adapters tr[data-adapter="{adapter}"] td:nth-child(3)').inner_text()


def test_adapters_tab_shows_where_each_is_loaded_and_adds_and_removes(live_server, page):
    api = client_for("adapters-api")
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    service = Service.objects.get(name="tuned")
    for name, adapters in (
        (
            "tuned-a",
            {
                "generation": 1,
                "loaded": ["sql"],
                "failed": {"chat": "no adapter found at /adapters"},
            },
        ),
        ("tuned-b", {"generation": 1, "loaded": ["sql", "chat"], "failed": {}}),
    ):
        Instance.objects.create(service=service, name=name, node="n1", runtime="process",
                                spec_hash="h", state=InstanceState.READY,
                                adapters=adapters)  # fmt: skip
    minute = timezone.now().replace(second=0, microsecond=0)
    UsageRecord.objects.create(minute=minute, service="tuned", key_id="-", adapter="sql",
                               requests=3, prompt_tokens=1200, completion_tokens=300,
                               workspace=service.workspace)  # fmt: skip

    page.goto(f"{live_server.url}/services/tuned/#adapters")
    page.locator('#svc-adapters tr[data-adapter="sql"]').wait_for()
    sql = page.locator('#svc-adapters tr[data-adapter="sql"]').inner_text()
    assert "tiny-sql" in sql and "3" in sql and "1.5k" in sql  # calls, tokens
    assert states(page, "sql").count("loaded") == 2
    chat = states(page, "chat")
    assert "failed" in chat and "no adapter found at /adapters" in chat and "loaded" in chat
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "19-service-adapters.png"), full_page=True)

    # A bad name is the API's 400, shown naming the field; nothing is added.
    page.fill("#adapter-form input[name=name]", "a:b")
    page.fill("#adapter-form input[name=model]", "tiny-extra")
    page.click("#adapter-form button[type=submit]")
    error = page.wait_for_selector("#adapters-error:not([hidden])")
    assert "name:" in error.inner_text()
    # Added: a new version, listed, loading on the instances until their nodes load it.
    page.fill("#adapter-form input[name=name]", "extra")
    page.click("#adapter-form button[type=submit]")
    page.locator('#svc-adapters tr[data-adapter="extra"]').wait_for()
    assert states(page, "extra").count("loading") == 2
    assert Service.objects.get(name="tuned").versions.count() == 2
    # Removed.
    page.locator('#svc-adapters tr[data-adapter="sql"] button:has-text("Remove")').click()
    page.locator('#svc-adapters tr[data-adapter="sql"]').wait_for(state="detached")
    names = [a["name"] for a in Service.objects.get(name="tuned").plain_spec()["llm"]["lora"][
        "adapters"]]  # fmt: skip
    assert names == ["chat", "extra"]

    # The online test offers the service's model and each adapter.
    page.click("#svc-tabs [data-tab=test]")
    shown = "() => [...document.querySelectorAll('#test-adapter option')].map(o => o.textContent)"
    page.wait_for_function(f'({shown})().join() === "the service\'s model,tuned:chat,tuned:extra"')
    assert page.evaluate(shown) == ["the service's model", "tuned:chat", "tuned:extra"]
