"""The older ROA signature (`acs ID:SIGNATURE`, HMAC-SHA1), which Terraform's alicloud provider
signs with: checked against the signer in EAS's own SDK (alibabacloud-openapi-util), then
through the SDK itself set to sign that way, calling as Terraform's alicloud_pai_service does
(ClusterId repeated in the query, `{"ServiceName": …}` bodies on start and stop)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from alibabacloud_eas20210701 import models as eas
from alibabacloud_eas20210701.client import Client
from alibabacloud_openapi_util.client import Client as Signer
from alibabacloud_tea_openapi import models as openapi
from alibabacloud_tea_util.models import RuntimeOptions

from controlplane.eas_api import signature_roa
from controlplane.eas_api.signature import SignatureRefusedError
from controlplane.services.models import Service
from tests.eas_openapi_support import REGION, key_pair, refusal

SECRET = "s3cret-of-the-pair"
NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
DATE = "Sat, 28 Nov 2026 12:00:00 GMT"
REQUESTS = [  # (method, path, query, content type)
    ("GET", "/api/v2/services", {}, ""),
    ("GET", "/api/v2/services", {"PageSize": "10", "ServiceName": "tiny"}, ""),
    ("PUT", "/api/v2/services/cn-hangzhou/tiny/start", {"ClusterId": "cn-hangzhou"},
     "application/json; charset=utf-8"),
    ("POST", "/api/v2/services", {"Labels": '{"a": "b"}', "Develop": ""}, "application/json"),
]  # fmt: skip


def signed(method: str, path: str, query: dict, content_type: str) -> dict[str, str]:
    headers = {"date": DATE, "host": "127.0.0.1:8000", "accept": "application/json",
               "x-acs-signature-nonce": "n1", "x-acs-signature-method": "HMAC-SHA1",
               "x-acs-signature-version": "1.0", "x-acs-version": "2021-07-01",
               "x-acs-action": "Any"}  # fmt: skip
    if content_type:
        headers["content-type"] = content_type
    request = SimpleNamespace(method=method, pathname=path, query=query, headers=headers)
    to_sign = Signer.get_string_to_sign(request)
    headers["authorization"] = f"acs WAKID:{Signer.get_roasignature(to_sign, SECRET)}"
    return headers


def verify(method: str, path: str, query: dict, headers: dict[str, str], secret=SECRET):
    key_id, sent = signature_roa.parse_authorization(headers["authorization"])
    signature_roa.check_date(headers["date"], NOW)
    to_sign = signature_roa.string_to_sign(method, path, list(query.items()), headers)
    signature_roa.check_signature(sent, secret, to_sign)
    return key_id


@pytest.mark.parametrize(("method", "path", "query", "content_type"), REQUESTS)
def test_what_the_roa_signer_signs_is_verified(method, path, query, content_type):
    assert verify(method, path, query, signed(method, path, query, content_type)) == "WAKID"


@pytest.mark.parametrize(("method", "path", "query", "content_type"), REQUESTS)
def test_a_roa_signature_under_another_secret_or_another_query_is_refused(
    method, path, query, content_type
):
    headers = signed(method, path, query, content_type)
    with pytest.raises(SignatureRefusedError):
        verify(method, path, query, headers, secret="another")
    with pytest.raises(SignatureRefusedError):
        verify(method, path, {**query, "Extra": "1"}, headers)


@pytest.mark.parametrize(
    ("sent", "code"),
    [("Sat, 28 Nov 2026 11:40:00 GMT", "InvalidTimeStamp.Expired"),
     ("2026-11-28T12:00:00Z", "InvalidTimeStamp.Format"), (None, "InvalidTimeStamp.Format")],
)  # fmt: skip
def test_a_roa_date_outside_fifteen_minutes_or_unreadable_is_refused(sent, code):
    with pytest.raises(SignatureRefusedError) as refused:
        signature_roa.check_date(sent, NOW)
    assert refused.value.code == code


def test_a_body_not_matching_its_content_md5_is_refused():
    with pytest.raises(SignatureRefusedError) as refused:
        signature_roa.check_body({"content-md5": "1B2M2Y8AsgTpgAmY7PhCfg=="}, b"{}")
    assert refused.value.code == "SignatureDoesNotMatch"
    signature_roa.check_body({"content-md5": "1B2M2Y8AsgTpgAmY7PhCfg=="}, b"")  # md5 of ""


SPEC = {"metadata": {"name": "tiny", "instance": 1},
        "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}  # fmt: skip


@pytest.fixture
def roa(live_server, settings, redis_url):
    """EAS's SDK signing the older way (signature_algorithm v2), as Terraform's provider does."""
    from controlplane import intents

    settings.REDIS_URL = redis_url
    settings.CELERY_BROKER_URL = redis_url.replace("unix://", "redis+socket://", 1)
    intents._celery.cache_clear()
    key, secret = key_pair("alice")
    config = openapi.Config(access_key_id=key.key_id, access_key_secret=secret,
                            region_id=REGION, endpoint=urlsplit(live_server.url).netloc,
                            protocol="http", signature_algorithm="v2")  # fmt: skip
    yield Client(config)
    intents._celery.cache_clear()


def terraform_put(client: Client, path: str, action: str, body: dict) -> dict:
    """A PUT as Terraform's provider makes it: ClusterId in the query too."""
    params = openapi.Params(action=action, version="2021-07-01", protocol="HTTP",
                            pathname=path, method="PUT", auth_type="AK", style="ROA",
                            req_body_type="json", body_type="json")  # fmt: skip
    request = openapi.OpenApiRequest(query={"ClusterId": REGION}, body=body)
    return client.call_api(params, request, RuntimeOptions())


@pytest.mark.django_db(transaction=True)
def test_terraforms_calls_work_with_the_older_signature(roa):
    roa.create_service(eas.CreateServiceRequest(body=json.dumps(SPEC)))
    assert roa.describe_service(REGION, "tiny").body.status == "Waiting"
    terraform_put(roa, f"/api/v2/services/{REGION}/tiny/stop", "StopService",
                  {"ServiceName": "tiny"})  # fmt: skip
    assert Service.objects.get(name="tiny").desired_state == "stopped"
    terraform_put(roa, f"/api/v2/services/{REGION}/tiny", "UpdateService",
                  {"metadata": {"instance": 2}})  # fmt: skip
    assert Service.objects.get(name="tiny").spec["metadata"]["instance"] == 2
    roa.delete_service(REGION, "tiny")
    assert refusal(lambda: roa.describe_service(REGION, "tiny")).code == "InvalidService.NotFound"


@pytest.mark.django_db(transaction=True)
def test_the_older_signature_under_a_wrong_secret_is_refused(live_server):
    key, _ = key_pair("alice")
    config = openapi.Config(access_key_id=key.key_id, access_key_secret="wrong",
                            endpoint=urlsplit(live_server.url).netloc, protocol="http",
                            signature_algorithm="v2")  # fmt: skip
    exc = refusal(lambda: Client(config).list_services(eas.ListServicesRequest()))
    assert (exc.status_code, exc.code) == (400, "SignatureDoesNotMatch")
