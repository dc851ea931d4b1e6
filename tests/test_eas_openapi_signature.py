"""ACS3-HMAC-SHA256 checked (controlplane.eas_api.signature, pure) against the signer in EAS's
own SDK (alibabacloud-tea-openapi's get_authorization): what it signs, Wharf verifies, for a
table of requests; anything changed after signing is refused."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from types import SimpleNamespace
from urllib.parse import unquote

import pytest
from alibabacloud_tea_openapi.utils import Utils

from controlplane.eas_api import signature

SECRET = "s3cret-of-the-pair"
NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
DATE = "2026-11-28T12:00:00Z"
# (method, path as the SDK encodes it, query, body)
REQUESTS = [
    ("GET", "/api/v2/services", {}, b""),
    ("GET", "/api/v2/services", {"PageSize": "10", "ServiceName": "tiny"}, b""),
    ("GET", "/api/v2/services", {"Label": '{"team": "search ~ x/y"}', "Sort": "CreateTime"}, b""),
    ("POST", "/api/v2/services", {"Labels": '{"a":"é"}'}, b'{"metadata": {"name": "tiny"}}'),
    ("PUT", "/api/v2/services/cn-hangzhou/tiny", {"UpdateType": "merge"}, b"{}"),
    ("DELETE", "/api/v2/services/cn-hangzhou/my_svc-1", {}, b""),
]


def signed(method: str, path: str, query: dict, body: bytes) -> dict[str, str]:
    """The headers EAS's SDK sends, Authorization made by its own signer."""
    headers = {"host": "127.0.0.1:8000", "x-acs-action": "Any", "x-acs-version": "2021-07-01",
               "x-acs-date": DATE, "x-acs-signature-nonce": "n1", "accept": "application/json",
               "user-agent": "AlibabaCloud (test) TeaDSL/1",
               "x-acs-content-sha256": hashlib.sha256(body).hexdigest()}  # fmt: skip
    request = SimpleNamespace(method=method, pathname=path, query=query, headers=headers)
    headers["Authorization"] = Utils.get_authorization(
        request, signature.ALGORITHM, headers["x-acs-content-sha256"], "WAKID", SECRET
    )
    return headers


def verify(method: str, path: str, query: dict, body: bytes, headers: dict[str, str]) -> None:
    """As the server does, from what it received: a decoded path and query."""
    received = {name.lower(): value for name, value in headers.items()}
    credential = signature.parse_authorization(received["authorization"])
    signature.check_date(received["x-acs-date"], NOW)
    payload = signature.check_body(received, body)
    canonical = signature.canonical_request(
        method, unquote(path), list(query.items()), received, credential.signed_headers, payload
    )
    signature.check_signature(credential, SECRET, canonical)


@pytest.mark.parametrize(("method", "path", "query", "body"), REQUESTS)
def test_what_the_sdk_signs_is_verified(method, path, query, body):
    verify(method, path, query, body, signed(method, path, query, body))


@pytest.mark.parametrize(("method", "path", "query", "body"), REQUESTS)
def test_another_secret_does_not_match(method, path, query, body):
    headers = signed(method, path, query, body)
    received = {name.lower(): value for name, value in headers.items()}
    credential = signature.parse_authorization(received["authorization"])
    canonical = signature.canonical_request(method, unquote(path), list(query.items()),
                                            received, credential.signed_headers,
                                            received["x-acs-content-sha256"])  # fmt: skip
    with pytest.raises(signature.SignatureRefusedError) as refused:
        signature.check_signature(credential, "another-secret", canonical)
    assert refused.value.code == "SignatureDoesNotMatch"


TAMPERED = [  # what is changed after signing -> the code refusing it
    ("method", "SignatureDoesNotMatch"),
    ("path", "SignatureDoesNotMatch"),
    ("query", "SignatureDoesNotMatch"),
    ("body", "SignatureDoesNotMatch"),
    ("signed header", "SignatureDoesNotMatch"),
]


@pytest.mark.parametrize(("what", "code"), TAMPERED)
def test_a_request_changed_after_signing_is_refused(what, code):
    method, path, query, body = "PUT", "/api/v2/services/cn-hangzhou/tiny", {"A": "1"}, b"{}"
    headers = signed(method, path, query, body)
    method = "DELETE" if what == "method" else method
    path = path + "x" if what == "path" else path
    query = {"A": "2"} if what == "query" else query
    body = b'{"x": 1}' if what == "body" else body
    if what == "signed header":
        headers["x-acs-action"] = "DeleteService"
    with pytest.raises(signature.SignatureRefusedError) as refused:
        verify(method, path, query, body, headers)
    assert refused.value.code == code


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (None, "IncompleteSignature"),
        ("Bearer wat-token", "IncompleteSignature"),
        ("ACS3-HMAC-SHA256 Credential=K,Signature=abc", "IncompleteSignature"),
        ("ACS3-HMAC-SHA256 Credential=K,SignedHeaders=host;x-acs-date,Signature=a",
         "IncompleteSignature"),  # x-acs-content-sha256 unsigned: the body could change
    ],
)  # fmt: skip
def test_an_authorization_that_is_not_a_whole_acs3_one_is_incomplete(authorization, code):
    with pytest.raises(signature.SignatureRefusedError) as refused:
        signature.parse_authorization(authorization)
    assert refused.value.code == code


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        ("2026-11-28T11:40:00Z", "InvalidTimeStamp.Expired"),
        ("2026-11-28T12:20:00Z", "InvalidTimeStamp.Expired"),
        ("Sat, 28 Nov 2026 12:00:00 GMT", "InvalidTimeStamp.Format"),
        (None, "InvalidTimeStamp.Format"),
    ],
)
def test_a_date_outside_fifteen_minutes_or_unreadable_is_refused(sent, code):
    with pytest.raises(signature.SignatureRefusedError) as refused:
        signature.check_date(sent, NOW)
    assert refused.value.code == code


@pytest.mark.parametrize("sent", ["2026-11-28T11:46:00Z", "2026-11-28T12:14:00Z", DATE])
def test_a_date_within_fifteen_minutes_is_taken(sent):
    signature.check_date(sent, NOW)
