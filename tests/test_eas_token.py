"""EAS's `token` and `generate_token` through the real API (PostgreSQL, the routing snapshot in
Redis): a spec's fixed token is the service's token the gateways check, sealed at rest, shown
masked, kept across updates that send it back masked, replaced by a new one; no two services
share one; and a service is never left without a token."""

from __future__ import annotations

import pytest

from controlplane.services.models import Event, Service
from controlplane.services.routing import publish_snapshot
from controlplane.tokens.models import digest
from tests.api_support import client_for, published

pytestmark = pytest.mark.django_db

TOKEN = "my-fixed-token-0123456789"
SPEC = {"metadata": {"name": "fixed", "instance": 0},
        "containers": [{"image": "registry.example/app:1", "command": "serve", "port": 8000}],
        "token": TOKEN}  # fmt: skip


def digests(store, name: str) -> set[str]:
    publish_snapshot()
    return set(published(store).services[name].token_digests)


def test_a_fixed_token_is_the_services_token_sealed_and_masked(api, store):
    answer = api.post("/api/v1/services", SPEC, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["token"] == TOKEN
    assert digests(store, "fixed") == {digest(TOKEN)}
    stored = Service.objects.get(name="fixed").spec
    assert TOKEN not in str(stored) and stored["token"].startswith("wharf-sealed:")
    shown = api.get("/api/v1/services/fixed").json()["spec"]
    assert shown["token"] == "******"
    assert api.get("/api/v1/services/fixed?format=eas").json()["token"] == "******"


def test_kept_across_updates_sent_back_masked_and_replaced_by_a_new_one(api, store):
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    shown = api.get("/api/v1/services/fixed").json()["spec"]
    assert api.put("/api/v1/services/fixed", shown, format="json").status_code == 200
    assert digests(store, "fixed") == {digest(TOKEN)}
    new = "another-fixed-token-987654"
    assert (
        api.put("/api/v1/services/fixed", {**SPEC, "token": new}, format="json").status_code == 200
    )
    assert digests(store, "fixed") == {digest(new)}  # the old one stops working
    assert Event.objects.filter(service__name="fixed", reason="TokenRotated").exists()
    rotate = api.post("/api/v1/services/fixed/token")
    assert rotate.status_code == 409 and "fixed by its spec" in rotate.json()["detail"]
    assert digests(store, "fixed") == {digest(new)}


def test_no_two_services_share_a_token(api, store):
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    other = client_for("bob", workspace="team-b")
    copy = {**SPEC, "metadata": {"name": "copycat", "instance": 0}}
    answer = other.post("/api/v1/services", copy, format="json")
    assert answer.status_code == 400 and "token" in answer.json()["errors"]
    assert not Service.objects.filter(name="copycat").exists()


@pytest.mark.parametrize(
    ("parts", "status", "field"),
    [
        ({"generate_token": "true"}, 201, None),  # EAS's string form: a token is made
        ({"generate_token": False}, 400, "generate_token"),
        ({"generate_token": False, "token": TOKEN}, 201, None),
        ({"token": "short"}, 400, "token"),
        ({"token": "has a space in it, see"}, 400, "token"),
    ],
)
def test_generate_token_and_bad_tokens(api, store, parts, status, field):
    spec = {k: v for k, v in SPEC.items() if k != "token"}
    answer = api.post("/api/v1/services", {**spec, **parts}, format="json")
    assert answer.status_code == status, answer.json()
    if field:
        assert field in answer.json()["errors"]
    else:
        assert answer.json()["token"]


def test_a_token_sent_masked_with_none_stored_asks_for_it(api, store):
    spec = {k: v for k, v in SPEC.items() if k != "token"}
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    answer = api.put("/api/v1/services/fixed", {**spec, "token": "******"}, format="json")
    assert answer.status_code == 400 and "token" in answer.json()["errors"]


def test_a_rollback_brings_the_versions_fixed_token_back(api, store):
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    new = "another-fixed-token-987654"
    assert (
        api.put("/api/v1/services/fixed", {**SPEC, "token": new}, format="json").status_code == 200
    )
    answer = api.post("/api/v1/services/fixed/rollback", {"version": 1}, format="json")
    assert answer.status_code in (200, 202), answer.json()
    assert digests(store, "fixed") == {digest(TOKEN)}
