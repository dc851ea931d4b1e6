"""eascmd configured as against EAS, with an access key pair (`-i AccessKeyId -k
AccessKeySecret`): each request to Wharf's API is signed with it (Alibaba's ROA signature,
wharfcli.acs_auth) and acts as the pair's user in its workspace; a wrong secret, a revoked
pair, an unsigned body change are refused. Against Django's live server, on the real API."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner
from django.utils import timezone

from controlplane.eas_api.models import AccessKey
from tests.eas_openapi_support import key_pair
from tests.test_fleet import custom, deploy
from wharfcli.acs_auth import AccessKeyAuth
from wharfcli.eascmd import cli

pytestmark = pytest.mark.django_db(transaction=True)


def eascmd(tmp_path, url: str, key_id: str, secret: str, *verb: str):
    config = tmp_path / "config"
    return CliRunner().invoke(
        cli, ["-c", str(config), "-i", key_id, "-k", secret, "-e", url, *verb]
    )


def test_eascmd_signs_with_an_access_key_pair(tmp_path, live_server, store):
    deploy(custom("web"))
    key, secret = key_pair("alice")
    result = eascmd(tmp_path, live_server.url, key.key_id, secret, "ls")
    assert result.exit_code == 0, result.output
    assert "| web " in result.output and secret not in result.output
    assert AccessKey.objects.get(pk=key.pk).last_used_at is not None

    wrong = eascmd(tmp_path, live_server.url, key.key_id, secret[:-1] + "x", "ls")
    assert wrong.exit_code == 3 and "SignatureDoesNotMatch" in wrong.output
    AccessKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    revoked = eascmd(tmp_path, live_server.url, key.key_id, secret, "ls")
    assert revoked.exit_code == 3 and "InvalidAccessKeyId.NotFound" in revoked.output


def test_a_signed_body_cannot_be_changed_on_the_way(live_server, store):
    key, secret = key_pair("alice")

    def tamper(request: httpx.Request) -> None:  # after signing: what a proxy might do
        request.stream = httpx.ByteStream(b'{"name": "evil"}')
        request.headers["Content-Length"] = "16"

    signed = httpx.Client(base_url=live_server.url, auth=AccessKeyAuth(key.key_id, secret))
    answer = signed.post("/api/v1/services", json={"name": "web"}, extensions={})
    assert answer.status_code == 400  # signed and accepted as alice: the spec itself is refused
    with httpx.Client(base_url=live_server.url, auth=AccessKeyAuth(key.key_id, secret),
                      event_hooks={"request": [tamper]}) as client:  # fmt: skip
        answer = client.post("/api/v1/services", json={"name": "web"})
    assert answer.status_code == 401 and "Content-MD5" in answer.text
