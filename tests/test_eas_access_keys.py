"""Access key pairs for EAS's SDKs: made by `manage.py create_access_key` or the REST API,
the secret shown once and sealed at rest, revocable; a signed request is honoured once."""

from __future__ import annotations

import hashlib
import io
from datetime import UTC, datetime
from types import SimpleNamespace
from urllib.parse import urlsplit

import httpx
import pytest
from alibabacloud_eas20210701 import models as eas
from alibabacloud_tea_openapi.utils import Utils
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from controlplane.eas_api.models import AccessKey
from controlplane.services.sealing import PREFIX
from tests.api_support import member
from tests.eas_openapi_support import key_pair, refusal, sdk


def _made(out: str) -> tuple[str, str]:
    fields = dict(line.split(": ", 1) for line in out.strip().splitlines())
    return fields["AccessKeyId"], fields["AccessKeySecret"]


@pytest.mark.django_db
def test_the_command_prints_a_pair_whose_secret_is_sealed_at_rest():
    user = get_user_model().objects.create_user("alice")
    member(user, "developer", "team-a")
    out = io.StringIO()
    call_command("create_access_key", "alice", "--workspace", "team-a", stdout=out)
    key_id, secret = _made(out.getvalue())
    stored = AccessKey.objects.get(key_id=key_id)
    assert (stored.user, stored.workspace.name) == (user, "team-a")
    assert stored.sealed_secret.startswith(PREFIX) and secret not in stored.sealed_secret
    assert stored.secret() == secret


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "says"),
    [(["nobody"], "no active user"), (["alice", "--workspace", "nope"], "no workspace"),
     (["alice", "--workspace", "team-b"], "not a member")],
)  # fmt: skip
def test_the_command_refuses_a_user_without_that_workspace(args, says):
    user = get_user_model().objects.create_user("alice")
    member(user, "developer", "team-a")
    member(get_user_model().objects.create_user("bob"), "developer", "team-b")
    with pytest.raises(CommandError, match=says):
        call_command("create_access_key", *args)


@pytest.mark.django_db
def test_the_rest_api_shows_the_secret_once_and_lists_without_it(api):
    made = api.post("/api/v1/access-keys", {"name": "terraform"}, format="json")
    assert made.status_code == 201
    body = made.json()
    assert body["name"] == "terraform" and body["workspace"] == "default" and body["secret"]
    listed = api.get("/api/v1/access-keys").json()
    assert [k["key_id"] for k in listed] == [body["key_id"]]
    assert "secret" not in listed[0]


@pytest.mark.django_db
def test_the_rest_api_refuses_an_unknown_field(api):
    made = api.post("/api/v1/access-keys", {"name": "x", "role": "owner"}, format="json")
    assert made.status_code == 400 and "role" in made.json()["errors"]


@pytest.mark.django_db(transaction=True)
def test_a_revoked_key_stops_working(api, live_server):
    made = api.post("/api/v1/access-keys", {}, format="json").json()
    client = sdk(live_server.url, made["key_id"], made["secret"])
    assert client.list_services(eas.ListServicesRequest()).body.total_count == 0
    assert api.delete(f"/api/v1/access-keys/{made['key_id']}").status_code == 204
    exc = refusal(lambda: client.list_services(eas.ListServicesRequest()))
    assert exc.code == "InvalidAccessKeyId.NotFound"


@pytest.mark.django_db
def test_one_users_key_is_not_anothers_to_revoke(api):
    key, _ = key_pair("bob")
    assert api.delete(f"/api/v1/access-keys/{key.key_id}").status_code == 404
    assert AccessKey.objects.get(pk=key.pk).revoked_at is None


@pytest.mark.django_db(transaction=True)
def test_a_replayed_request_is_refused(live_server):
    key, secret = key_pair("alice")
    path = "/api/v2/services"
    headers = {"host": urlsplit(live_server.url).netloc, "x-acs-action": "ListServices",
               "x-acs-version": "2021-07-01", "x-acs-signature-nonce": "once",
               "x-acs-date": f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}",
               "x-acs-content-sha256": hashlib.sha256(b"").hexdigest()}  # fmt: skip
    request = SimpleNamespace(method="GET", pathname=path, query={}, headers=headers)
    headers["Authorization"] = Utils.get_authorization(
        request, "ACS3-HMAC-SHA256", headers["x-acs-content-sha256"], key.key_id, secret
    )
    first = httpx.get(live_server.url + path, headers=headers)
    again = httpx.get(live_server.url + path, headers=headers)
    assert first.status_code == 200 and first.json()["TotalCount"] == 0
    assert again.status_code == 400 and again.json()["Code"] == "SignatureNonceUsed"
    assert again.json()["RequestId"]


@pytest.mark.django_db(transaction=True)
def test_the_cli_makes_lists_and_revokes_a_pair_the_sdk_signs_with(live_server, tmp_path):
    from click.testing import CliRunner

    from controlplane.tokens.models import ApiToken
    from wharfcli.main import cli

    user = get_user_model().objects.create_user("alice")
    token = ApiToken.issue(user, member(user, "developer"), "cli")
    env = {"WHARF_API": live_server.url, "WHARF_TOKEN": token,
           "WHARF_CONFIG_DIR": str(tmp_path)}  # fmt: skip
    runner = CliRunner()
    made = runner.invoke(cli, ["access-keys", "create", "--name", "tf"], env=env)
    assert made.exit_code == 0, made.output
    key_id, secret = _made(made.output.replace("  (shown once)", ""))
    client = sdk(live_server.url, key_id, secret)
    assert client.list_services(eas.ListServicesRequest()).body.total_count == 0
    listed = runner.invoke(cli, ["access-keys", "list"], env=env)
    assert key_id in listed.output and secret not in listed.output
    assert runner.invoke(cli, ["access-keys", "revoke", key_id], env=env).exit_code == 0
    assert refusal(lambda: client.list_services(eas.ListServicesRequest())).status_code == 404


@pytest.mark.django_db
def test_rotating_the_secrets_key_seals_the_pairs_again(settings):
    from cryptography.fernet import Fernet

    key, secret = key_pair("alice")
    old = settings.WHARF_SECRETS_KEY
    settings.WHARF_SECRETS_KEY = Fernet.generate_key().decode()
    settings.WHARF_SECRETS_KEY_PREVIOUS = [old]  # the old key opens, the new one seals
    out = io.StringIO()
    call_command("rotate_secrets", stdout=out)
    assert "1 access key secret(s) sealed again" in out.getvalue()
    settings.WHARF_SECRETS_KEY_PREVIOUS = []  # the old key dropped: the pair still opens
    assert AccessKey.objects.get(pk=key.pk).secret() == secret
