"""The console's Batches page in Chromium: a developer sees a batch's progress move while its
requests are answered (the page polls while it runs), opens its detail with its error lines,
cancels it and downloads its output file once it has ended; a viewer sees the same batch with
no Cancel button, and the API refuses the viewer's cancel. Batches are made with the batches'
store functions, as the gateway's calls make them; the answers come through the queues' own
lease and finish, as a gateway's would. Only the console and its API run here (Django's live
server on the test database), as in test_console_self_service."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections

from contracts import batch as contract
from controlplane.batches import store
from controlplane.batches.models import Batch
from controlplane.queues import store as queues
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey
from tests.api_support import member, snapshot_store
from tests.browser.test_console_self_service import (  # noqa: F401 (chromium: a fixture)
    CALL,
    PASSWORD,
    People,
    chromium,
    shot,
)

TEAM = "team"
LINES = 4


@pytest.fixture
def team(chromium, live_server, transactional_db, settings, redis_url, tmp_path):  # noqa: F811
    """Workspace `team` with a service `chat`, `dev` (developer) and `watcher` (viewer)."""
    settings.WHARF_BATCH_DIR = tmp_path
    snapshot_store(settings, redis_url)  # batches republish the routing snapshot here
    users = get_user_model().objects
    dev = users.create_user("dev", password=PASSWORD)
    workspace = member(dev, "developer", TEAM)
    member(users.create_user("watcher", password=PASSWORD), "viewer", TEAM)
    spec = {"name": "chat", "metadata": {"instance": 1, "rpc": {"worker_threads": 2}},
            "containers": [{"image": "i", "command": "c", "port": 8000}]}  # fmt: skip
    Service.objects.create(name="chat", spec=spec, workspace=workspace)
    people = People(chromium, live_server.url)
    people.key = ApiKey.issue(dev, workspace, "batches")[0]
    yield people
    for context in people.contexts:
        context.close()
    connections.close_all()  # see tests.browser.chromium.signed_in


def _batch(key: ApiKey) -> Batch:
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "chat" if i else "nowhere"}} for i in range(LINES)]  # fmt: skip
    text = "\n".join(json.dumps(line) for line in lines).encode()
    file = store.save_file(key, "in.jsonl", "batch", SimpleUploadedFile("in.jsonl", text))
    return store.create_batch(key, file.id, "/v1/chat/completions", "24h", None)


def _progress(page, batch: Batch) -> str:
    return page.inner_text(f'tr[data-batch="{batch.id}"] .batch-progress .sub')


def test_a_developer_watches_a_batch_and_cancels_it(team):
    batch = _batch(team.key)  # r0 names no service: it failed at once
    chat = Service.objects.get(name="chat")
    first, second = queues.lease(chat, "g", ["chat-0"], 300)  # the window: 2
    queues.finish(first.id, "g", 200, b'{"ok": 1}', "application/json")
    page = team.open_as("dev", "/batches/")
    assert "Batches" in page.eval_on_selector_all(".topbar nav a", "a => a.map(n => n.textContent)")
    row = page.wait_for_selector(f'tr[data-batch="{batch.id}"]')
    assert row.get_attribute("data-status") == contract.IN_PROGRESS
    assert _progress(page, batch) == "2/4 · 1 failed"
    assert "chat" in row.inner_text()
    queues.finish(second.id, "g", 200, b'{"ok": 2}', "application/json")
    page.wait_for_function(  # the page polls while the batch runs
        f"""() => document.querySelector('tr[data-batch="{batch.id}"] .batch-progress')
                   .dataset.done === "3" """
    )
    page.click(f'tr[data-batch="{batch.id}"] td:nth-child(2)')  # the row, not its button
    detail = page.wait_for_selector(f'#batch-detail[data-batch="{batch.id}"]')
    page.wait_for_selector("#batch-errors")
    assert "model_not_found" in page.inner_text("#batch-errors")
    assert detail.query_selector('[data-file="input"]') is not None
    assert detail.query_selector('[data-file="output"]') is None  # written when it ends
    shot(page, "console-batches-running")

    (third,) = queues.lease(chat, "g", ["chat-0"], 300)  # in work while it is cancelled
    page.click(f'tr[data-batch="{batch.id}"] [data-action=cancel]')
    page.click("#dialog [data-role=ok]")
    page.wait_for_selector(f'tr[data-batch="{batch.id}"][data-status="cancelling"]')
    queues.finish(third.id, "g", 200, b'{"ok": 3}', "application/json")  # then it ends
    page.wait_for_selector(f'tr[data-batch="{batch.id}"][data-status="cancelled"]')
    assert page.query_selector(f'tr[data-batch="{batch.id}"] [data-action=cancel]') is None
    link = page.wait_for_selector('#batch-detail [data-file="output"]')
    output = page.evaluate("async (url) => (await fetch(url)).text()", link.get_attribute("href"))
    assert sorted(json.loads(line)["custom_id"] for line in output.splitlines()) == [
        "r1", "r2", "r3",
    ]  # fmt: skip
    shot(page, "console-batches-cancelled")


def test_a_viewer_sees_progress_but_no_cancel(team):
    batch = _batch(team.key)
    page = team.open_as("watcher", "/batches/")
    page.wait_for_selector(f'tr[data-batch="{batch.id}"]')
    assert _progress(page, batch) == "1/4 · 1 failed"
    assert "needs the role developer" in page.inner_text("#batches-refused")
    page.click(f'tr[data-batch="{batch.id}"] td:nth-child(2)')
    page.wait_for_selector(f'#batch-detail[data-batch="{batch.id}"]')
    assert page.query_selector("[data-action=cancel]") is None
    status = page.evaluate(CALL, ["POST", f"/api/v1/batches/{batch.id}/cancel", None])
    assert status == 403
    assert Batch.objects.get(pk=batch.pk).status == contract.IN_PROGRESS
