"""Secrets at rest (real database, real Redis): spec secrets sealed in the rows and opened only
where used, a key of their own that rotates; token digests under a key separate from Django's;
the console's sign-in rate limited."""

from __future__ import annotations

import base64
import io
import json

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from controlplane.services.models import Service, ServiceVersion
from controlplane.services.sealing import PREFIX, UnsealError, unseal
from tests.api_support import client_for, member

pytestmark = pytest.mark.django_db

SECRET = "SK-at-rest-9f3c"
PULL = base64.b64encode(b"robot:registry-pass-77").decode()
SPEC = {
    "name": "sealed",
    "containers": [{"image": "registry.example/app:1", "command": "true"}],
    "dockerAuth": PULL,
    "storage": [{"mount_path": "/mnt/m", "oss": {
        "path": "oss://bucket/m/", "access_key_id": "AK", "access_key_secret": SECRET}}],
    "metadata": {"instance": 0},
}  # fmt: skip


def raw_rows() -> str:
    """The specs as the database holds them: what a dump or the database file would show."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT spec FROM services_service UNION ALL "
                       "SELECT spec FROM services_serviceversion")  # fmt: skip
        return json.dumps([row[0] for row in cursor.fetchall()])


def test_secrets_are_sealed_in_the_rows_and_open_where_used():
    api = client_for("dev")
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    stored = raw_rows()
    assert SECRET not in stored and PULL not in stored and "registry-pass" not in stored
    assert stored.count(PREFIX) == 4  # two secrets, in the service and its first version
    service = Service.objects.get(name="sealed")
    spec = service.parsed_spec()
    assert (spec.storage[0].oss.access_key_secret, spec.dockerAuth) == (SECRET, PULL)
    shown = api.get("/api/v1/services/sealed").json()["spec"]
    assert SECRET not in json.dumps(shown) and PULL not in json.dumps(shown)
    # An edit sent back with the masked values keeps the secrets; the hash sees plain text.
    assert api.put("/api/v1/services/sealed", shown, format="json").status_code == 200
    service.refresh_from_db()
    assert service.plain_spec() == SPEC
    first, second = ServiceVersion.objects.order_by("number")
    assert first.spec_hash == second.spec_hash  # sealed twice, differently: the same spec
    assert SECRET not in raw_rows()


def test_the_secrets_key_rotates(settings):
    api = client_for("dev")
    api.post("/api/v1/services", SPEC, format="json")
    old = settings.WHARF_SECRETS_KEY
    settings.WHARF_SECRETS_KEY = Fernet.generate_key().decode()
    with pytest.raises(UnsealError, match="WHARF_SECRETS_KEY"):
        Service.objects.get(name="sealed").parsed_spec()
    settings.WHARF_SECRETS_KEY_PREVIOUS = [old]  # the old key opens, the new one seals
    out = io.StringIO()
    call_command("rotate_secrets", stdout=out)
    assert out.getvalue().strip() == "2 spec(s) sealed again with the current key"
    settings.WHARF_SECRETS_KEY_PREVIOUS = []  # the old key dropped: all still opens
    assert Service.objects.get(name="sealed").plain_spec() == SPEC
    assert all(unseal(v.spec) == SPEC for v in ServiceVersion.objects.all())


@pytest.mark.django_db(transaction=True)
def test_specs_stored_before_are_sealed_by_the_migration():
    before = [("services", "0007_event_actor"), ("workspaces", "0003_quotas")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    executor.loader.build_graph()
    old = executor.loader.project_state(before).apps
    workspace = old.get_model("workspaces", "Workspace").objects.get_or_create(name="w")[0]
    old.get_model("services", "Service").objects.create(name="sealed", spec=SPEC,
                                                        workspace_id=workspace.pk)  # fmt: skip
    assert SECRET in raw_rows()
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert SECRET not in raw_rows() and PULL not in raw_rows()
    assert Service.objects.get(name="sealed").plain_spec() == SPEC


def test_rotating_djangos_key_voids_no_token_and_the_token_key_no_session(settings):
    api = client_for("dev")
    user = get_user_model().objects.create_user("eve", password="pw-eve-123")
    member(user)
    console = Client()
    console.force_login(user)
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-django-key-" + "x" * 40
    assert api.get("/api/v1/services").status_code == 200  # the token: another key
    settings.WHARF_TOKEN_KEY = "a-new-token-key"
    assert api.get("/api/v1/services").status_code == 401  # that key is the token's
    assert console.get("/api/v1/services").status_code == 200  # and not the session's


def test_signin_is_rate_limited_per_user(settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.WHARF_SIGNIN_ATTEMPTS = 3
    import redis

    for key in redis.Redis.from_url(redis_url).scan_iter("wharf:signin:*"):
        redis.Redis.from_url(redis_url).delete(key)
    get_user_model().objects.create_user("frank", password="right-pass-1")
    client = Client()
    for _ in range(3):
        wrong = client.post("/login/", {"username": "frank", "password": "wrong"})
        assert wrong.status_code == 200
    refused = client.post("/login/", {"username": "frank", "password": "right-pass-1"})
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "Too many failed sign-ins" in refused.content.decode()
    other = Client().post("/login/", {"username": "grace", "password": "x"})
    assert other.status_code == 200  # another user is not locked out by frank's count
    for key in redis.Redis.from_url(redis_url).scan_iter("wharf:signin:*"):
        redis.Redis.from_url(redis_url).delete(key)
    assert client.post("/login/", {"username": "frank", "password": "right-pass-1"}
                       ).status_code == 302  # fmt: skip


def test_the_gateway_checks_tokens_with_the_token_key(monkeypatch):
    from gateway.config import ConfigError, load_settings

    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("WHARF_SECRET_KEY", "djangos-key")
    monkeypatch.setenv("WHARF_TOKEN_KEY", "the-token-key")
    assert load_settings().secret_key == b"the-token-key"
    monkeypatch.delenv("WHARF_TOKEN_KEY")  # a deployment from before: the secret key was it
    assert load_settings().secret_key == b"djangos-key"
    monkeypatch.delenv("WHARF_SECRET_KEY")
    with pytest.raises(ConfigError, match="WHARF_TOKEN_KEY"):
        load_settings()


def test_the_hub_token_is_sealed_and_never_shown():
    api = client_for("dev")
    token = "hf_at_rest_31c7"
    llm = {"engine": "vllm-cpu", "model": "hf://org/private@main", "hub_token": token}
    spec = {"name": "hubbed", "metadata": {"instance": 0}, "llm": llm}
    created = api.post("/api/v1/services", spec, format="json")
    assert created.status_code == 201, created.content
    assert token not in created.content.decode() and token not in raw_rows()
    assert Service.objects.get(name="hubbed").parsed_spec().llm.hub_token == token
    for path in ("/api/v1/services/hubbed", "/api/v1/services/hubbed/versions"):
        assert token not in api.get(path).content.decode()
    spec["llm"]["model"] = "tiny-llama"  # the token then serves nothing: refused, named
    refused = api.put("/api/v1/services/hubbed", spec, format="json")
    assert refused.status_code == 400 and "llm.hub_token" in refused.json()["errors"]
    assert token not in refused.content.decode()
