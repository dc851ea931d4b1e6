"""The per-workspace quota on queued items (Async items and batch requests not yet answered):
the pure check as tables, then the store's refusals (an enqueue: 429 naming
quotas.queued_items; a batch: refused before anything is written) and the workspace API."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from controlplane.batches import store as batches
from controlplane.batches.models import Batch
from controlplane.queues import store
from controlplane.queues.models import QueueItem
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey, ApiToken
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.quotas import Quotas, queued_excess, queued_limit
from tests.api_support import client_for, default_workspace, member
from tests.test_async_queues import stack  # noqa: F401 (the fixture: an Async service, a gateway)
from wharfcli.main import cli


@pytest.mark.parametrize(
    ("limit", "queued", "adding", "over"),
    [
        (None, 10**6, 10**6, False),  # no bound
        (5, 4, 1, False),  # the last place
        (5, 5, 1, True),
        (5, 0, 6, True),  # a batch larger than the whole quota
        (5, 3, 2, False),
        (5, 3, 3, True),
        (0, 0, 1, True),  # a quota of 0: no queued work at all
        (5, 9, 0, False),  # putting nothing (a sink's item) is never refused, even past it
    ],
)
def test_which_puts_the_queued_items_quota_refuses(limit, queued, adding, over):
    assert bool(queued_excess(limit, queued, adding, "ws")) is over


def test_the_refusal_names_the_quota_and_the_figures():
    assert queued_excess(5, 4, 3, "team") == {
        "quotas.queued_items": [
            "this puts 3 item(s); workspace 'team' has 4 queued (Async items and batch "
            "requests not yet answered) of its quota of 5"
        ]
    }


@pytest.mark.parametrize(
    ("quotas", "default", "limit"),
    [
        (Quotas(), None, None),
        (Quotas(), 100, 100),  # the platform's default where the workspace sets none
        (Quotas(queued_items=10), 100, 10),
        (Quotas(queued_items=1000), 100, 1000),  # its own quota, not the default, holds
        (Quotas(queued_items=0), 100, 0),
    ],
)
def test_the_platform_default_applies_where_no_quota_is_set(quotas, default, limit):
    assert queued_limit(quotas, default) == limit


@pytest.mark.parametrize(
    ("quotas", "ceilings", "enforced", "above"),
    [
        (Quotas(queued_items=10), Quotas(), 10, set()),
        (Quotas(), Quotas(queued_items=10), 10, set()),
        (Quotas(queued_items=20), Quotas(queued_items=10), 10, {"quotas.queued_items"}),
        (Quotas(queued_items=5), Quotas(queued_items=10), 5, set()),
    ],
)
def test_a_queued_items_quota_is_capped_by_its_ceiling(quotas, ceilings, enforced, above):
    assert quotas.within(ceilings).queued_items == enforced
    assert set(quotas.above(ceilings)) == above


# The store's refusals, on the database.


def _async(workspace: Workspace, name: str = "sd") -> Service:
    spec = {"name": name, "metadata": {"type": "Async", "instance": 1},
            "containers": [{"image": "i", "command": "serve", "port": 8000}]}  # fmt: skip
    return Service.objects.create(name=name, spec=spec, workspace=workspace)


def _quota(workspace: Workspace, queued: int | None) -> None:
    workspace.quota_queued_items = queued
    workspace.save()


@pytest.mark.django_db
def test_an_enqueue_past_the_quota_is_a_429_naming_it_and_writes_nothing():
    workspace = default_workspace()
    _quota(workspace, 3)
    one, other = _async(workspace, "sd"), _async(workspace, "sd2")
    store.put(store.queue_of(one, "input"), b"a", tags={})
    for _ in range(2):  # the quota is the workspace's, across its services
        store.put(store.queue_of(other, "input"), b"b", tags={})
    with pytest.raises(store.QueueRefusal) as raised:
        store.put(store.queue_of(one, "input"), b"c", tags={})
    assert raised.value.status == 429 and raised.value.param == "quotas.queued_items"
    assert "has 3 queued" in raised.value.message and "quota of 3" in raised.value.message
    assert QueueItem.objects.count() == 3
    # An answer taken out of a sink frees nothing: only items not yet answered count.
    store.put(store.queue_of(one, "sink"), b"answer", tags={})
    # Another workspace has its own quota.
    elsewhere = Workspace.objects.create(name="elsewhere")
    store.put(store.queue_of(_async(elsewhere, "sd3"), "input"), b"d", tags={})


@pytest.mark.django_db
def test_the_platform_default_bounds_a_workspace_without_a_quota(settings):
    settings.WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE = 1
    queue = store.queue_of(_async(default_workspace()), "input")
    store.put(queue, b"a", tags={})
    with pytest.raises(store.QueueRefusal) as raised:
        store.put(queue, b"b", tags={})
    assert raised.value.status == 429 and "quota of 1" in raised.value.message
    _quota(default_workspace(), 2)  # a quota of its own replaces the default
    store.put(queue, b"b", tags={})


def _lines(n: int) -> bytes:
    return "\n".join(
        json.dumps(
            {
                "custom_id": f"r{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "chat"},
            }
        )  # fmt: skip
        for i in range(n)
    ).encode()


@pytest.mark.django_db
def test_a_batch_past_the_quota_is_refused_before_anything_is_written(settings, tmp_path):
    settings.WHARF_BATCH_DIR = tmp_path
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # publishing the snapshot is logged, not raised
    workspace = default_workspace()
    _quota(workspace, 4)
    Service.objects.create(name="chat", workspace=workspace, spec={
        "name": "chat", "containers": [{"image": "i", "command": "c", "port": 8000}]})  # fmt: skip
    store.put(store.queue_of(_async(workspace), "input"), b"waiting", tags={})
    owner = get_user_model().objects.create(username="owner")
    key = ApiKey.issue(owner, workspace, "k")[0]
    file = batches.save_file(key, "in.jsonl", "batch", SimpleUploadedFile("in", _lines(4)))
    with pytest.raises(store.QueueRefusal) as raised:
        batches.create_batch(key, file.id, "/v1/chat/completions", "24h", None)
    assert raised.value.status == 429 and raised.value.param == "quotas.queued_items"
    assert "this puts 4 item(s)" in raised.value.message and "has 1 queued" in raised.value.message
    assert not Batch.objects.exists() and QueueItem.objects.count() == 1  # nothing half-written
    fits = batches.save_file(key, "in.jsonl", "batch", SimpleUploadedFile("in", _lines(3)))
    batch = batches.create_batch(key, fits.id, "/v1/chat/completions", "24h", None)
    assert batch.total == 3 and QueueItem.objects.count() == 4


@pytest.mark.django_db
def test_admins_set_the_queued_items_quota_below_the_ceiling(settings):
    settings.WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE = 50
    admin = client_for("ann", role="admin", workspace="q")
    shown = admin.get("/api/v1/workspaces/q").json()
    assert shown["quotas"]["queued_items"] is None
    assert shown["limits"]["queued_items"] == 50  # the platform's default is enforced
    assert shown["used"]["queued_items"] == 0
    set_ = admin.patch("/api/v1/workspaces/q", {"quotas": {"queued_items": 7}}, format="json")
    assert set_.status_code == 200, set_.json()
    assert set_.json()["quotas"]["queued_items"] == 7 and set_.json()["limits"]["queued_items"] == 7
    bad = admin.patch("/api/v1/workspaces/q", {"quotas": {"queued_items": -1}}, format="json")
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"quotas.queued_items"}
    staff = client_for("root", staff=True, workspace="q")
    staff.patch("/api/v1/workspaces/q", {"ceilings": {"queued_items": 5}}, format="json")
    over = admin.patch("/api/v1/workspaces/q", {"quotas": {"queued_items": 6}}, format="json")
    assert over.status_code == 400 and set(over.json()["errors"]) == {"quotas.queued_items"}
    assert admin.get("/api/v1/workspaces/q").json()["limits"]["queued_items"] == 5


@pytest.mark.django_db
def test_the_consoles_quota_form_offers_queued_items():
    # The console's quota form (workspace.js) is generated by api_form.js from this body.
    from rest_framework.test import APIClient  # noqa: PLC0415

    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    patch = schema["paths"]["/api/v1/workspaces/{workspace}"]["patch"]
    assert patch["operationId"] == "workspaces_quotas"
    body = patch["requestBody"]["content"]["application/json"]["schema"]
    for part in ("quotas", "ceilings"):
        assert body["properties"][part]["properties"]["queued_items"]["minimum"] == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor == "sqlite", reason="needs PostgreSQL (its live server)")
def test_through_a_gateway_an_enqueue_past_the_quota_is_eas_429_naming_it(
    stack,  # noqa: F811 (the fixture imported above)
    live_server,
    tmp_path,
):
    admin = get_user_model().objects.create_user("root")
    env = {"WHARF_API": live_server.url, "WHARF_CONFIG_DIR": str(tmp_path / "wharf"),
           "WHARF_TOKEN": ApiToken.issue(admin, member(admin, "admin"), "cli")}  # fmt: skip
    args = ["workspaces", "quota", "default", "--queued-items", "0", "-o", "json"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["limits"]["queued_items"] == 0
    answer = httpx.post(
        f"http://{stack['gateway'].address}/api/predict/sd",
        content=b"{}",
        headers={"Authorization": stack["token"]},
    )
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert error["param"] == "quotas.queued_items" and "quota of 0" in error["message"]
    assert not QueueItem.objects.exists()
