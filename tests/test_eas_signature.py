"""EAS's signed calls, the pure parts: what is signed, which token signed it, whether its Date
is fresh and its body the one its Content-MD5 names; tokens sealed for the gateways and
carried in the routing snapshot."""

from __future__ import annotations

import base64
import hashlib

import pytest

from contracts.eas_signature import (
    SignedCall,
    body_matches,
    date_problem,
    is_signed,
    sign,
    signature_of,
    signed_by,
    string_to_sign,
)
from contracts.routing import RoutedKey, RoutedService, Snapshot
from contracts.token_sealing import open_token, seal_token, sealing_key
from contracts.tokens import token_digest
from gateway.eas.signing import SigningTokens

TOKEN = "wsk-the-services-token-0123456789"
NOW = 1_795_000_000.0
DATE = "Wed, 18 Nov 2026 11:06:40 GMT"  # NOW as an HTTP date
BODY = b'{"prompt": "hello"}'
MD5 = hashlib.md5(BODY).hexdigest()
PATH = "/api/predict/echo"


def call(authorization: str, **changed: str) -> SignedCall:
    signature = signature_of(authorization)
    assert signature is not None
    parts = {"method": "POST", "content_md5": MD5, "content_type": "application/json",
             "date": DATE, "path": PATH, **changed}  # fmt: skip
    return SignedCall(signature, **parts)


def signed(token: str = TOKEN) -> str:
    return sign(token, string_to_sign("POST", MD5, "application/json", DATE, PATH))


def test_the_string_to_sign_is_eas_sdks():
    # eas-prediction's predict_client.py: '%s\n%s\n%s\n%s\n%s' % (verb, md5, type, date,
    # resource), stripped, HMAC-SHA1 keyed with the token, base64.
    message = string_to_sign("POST", MD5, "application/json", DATE, PATH)
    assert message == f"POST\n{MD5}\napplication/json\n{DATE}\n{PATH}".encode()
    assert string_to_sign("POST", MD5, "", DATE, "/p \n").endswith(b"\n/p")  # ends stripped


@pytest.mark.parametrize(
    ("changed", "token", "valid"),
    [
        ({}, TOKEN, True),
        ({}, TOKEN + "x", False),  # another token
        ({"method": "GET"}, TOKEN, False),
        ({"content_md5": hashlib.md5(b"other").hexdigest()}, TOKEN, False),
        ({"content_type": "text/plain"}, TOKEN, False),
        ({"date": "Wed, 18 Nov 2026 11:06:41 GMT"}, TOKEN, False),
        ({"path": "/api/predict/other"}, TOKEN, False),
    ],
)
def test_a_signature_is_its_tokens_over_every_part(changed, token, valid):
    assert signed_by(token.encode(), call(signed(), **changed)) is valid


@pytest.mark.parametrize(
    ("authorization", "signature"),
    [
        (None, None),
        ("", None),
        ("wsk-a-token-in-clear", None),
        ("Bearer wsk-a-token", None),
        ("EAS", None),  # a scheme alone: a token named "EAS", not a signature
        ("EAS not-base64!", b""),
        ("EAS " + base64.b64encode(b"short").decode(), b""),  # not an HMAC-SHA1's length
        ("EAS " + base64.b64encode(b"x" * 20).decode(), b"x" * 20),
    ],
)
def test_the_signature_in_an_authorization_header(authorization, signature):
    assert signature_of(authorization) == signature
    assert is_signed(authorization) is (signature is not None)


@pytest.mark.parametrize(
    ("date", "refused_for"),
    [
        (DATE, None),
        ("Wed, 18 Nov 2026 10:52:40 GMT", None),  # 14 minutes old
        ("Wed, 18 Nov 2026 11:20:40 GMT", None),  # 14 minutes ahead
        ("Wed, 18 Nov 2026 10:50:00 GMT", "minutes old"),
        ("Wed, 18 Nov 2026 11:22:00 GMT", "ahead of the gateway's clock"),
        ("", "no Date header"),
        ("yesterday", "not an HTTP date"),
    ],
)
def test_a_signed_date_is_taken_within_fifteen_minutes(date, refused_for):
    problem = date_problem(date, NOW)
    assert problem is None if refused_for is None else refused_for in (problem or "")


@pytest.mark.parametrize(
    ("content_md5", "body", "matches"),
    [
        (MD5, BODY, True),
        (MD5.upper(), BODY, True),
        (base64.b64encode(hashlib.md5(BODY).digest()).decode(), BODY, True),  # RFC 1864's form
        (MD5, BODY + b" ", False),
        (hashlib.md5(b"").hexdigest(), b"", True),
        ("", BODY, False),
    ],
)
def test_a_body_matches_its_content_md5(content_md5, body, matches):
    assert body_matches(content_md5, body) is matches


def test_a_sealed_token_opens_only_with_the_token_key_it_was_sealed_under():
    sealed = seal_token(sealing_key(b"token key"), TOKEN)
    assert TOKEN not in sealed and sealed.startswith("wharf-token:v1:")
    assert open_token(sealing_key(b"token key"), sealed) == TOKEN.encode()
    assert open_token(sealing_key(b"another key"), sealed) is None
    assert open_token(sealing_key(b"token key"), TOKEN) is None  # a token in clear: not sealed


def test_sealed_tokens_ride_in_the_snapshot():
    sealed = seal_token(sealing_key(b"k"), TOKEN)
    snapshot = Snapshot(
        version=3,
        services={"echo": RoutedService("echo", token_digests=frozenset({"d"}),
                                        sealed_tokens=frozenset({sealed}))},
        keys={"kd": RoutedKey("k1", sealed_token=sealed), "old": RoutedKey("k2")},
    )  # fmt: skip
    text = snapshot.to_json()
    assert TOKEN not in text
    assert Snapshot.from_json(text) == snapshot
    assert "sealed_token" not in text.split('"old"')[1]  # a key without one carries none


def _gateway_tokens(secret_key: bytes, sealed_under: bytes) -> tuple[SigningTokens, Snapshot]:
    """A gateway's signing tokens for a snapshot whose tokens were sealed under `sealed_under`:
    service echo's own token, a key for echo and a key for other only."""
    key = sealing_key(sealed_under)
    services = {
        "echo": RoutedService("echo", sealed_tokens=frozenset({seal_token(key, TOKEN)})),
        "other": RoutedService("other"),
    }
    keys = {
        token_digest(secret_key, token): RoutedKey(
            f"k{i}", frozenset({scope}), sealed_token=seal_token(key, token)
        )
        for i, (token, scope) in enumerate((("wak-echo", "echo"), ("wak-other", "other")))
    }
    snapshot = Snapshot(version=1, services=services, keys=keys)
    signing = SigningTokens(secret_key)
    signing.load(snapshot)
    return signing, snapshot


@pytest.mark.parametrize(
    ("token", "service", "signer"),
    [
        (TOKEN, "echo", TOKEN),  # the service's own token
        (TOKEN, "other", None),  # not other's
        ("wak-echo", "echo", "wak-echo"),  # a key that reaches echo
        ("wak-other", "echo", None),  # a key that does not
        ("wak-unknown", "echo", None),
    ],
)
def test_the_gateway_finds_the_token_that_signed_among_those_that_may_call(token, service, signer):
    signing, snapshot = _gateway_tokens(b"token key", b"token key")
    message = string_to_sign("POST", MD5, "application/json", DATE, f"/api/predict/{service}")
    made = call(sign(token, message), path=f"/api/predict/{service}")
    expected = token_digest(b"token key", signer) if signer else None
    assert signing.signer(snapshot, service, made) == expected


def test_a_gateway_with_another_token_key_opens_no_sealed_token(caplog):
    signing, snapshot = _gateway_tokens(b"token key", b"the control plane's other key")
    assert signing.signer(snapshot, "echo", call(signed())) is None
    assert "3 sealed tokens" in caplog.text and TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("token", "owners", "signer"),
    [
        (TOKEN, ("echo", "other"), TOKEN),  # a member's token, to the group "grp"
        (TOKEN, ("other",), None),  # echo is no member
        ("wak-echo", ("echo", "other"), None),  # a key for echo does not reach the group
    ],
)
def test_a_call_to_a_group_is_signed_by_a_members_token(token, owners, signer):
    signing, snapshot = _gateway_tokens(b"token key", b"token key")
    message = string_to_sign("POST", MD5, "application/json", DATE, "/api/predict/grp")
    made = call(sign(token, message), path="/api/predict/grp")
    expected = token_digest(b"token key", signer) if signer else None
    assert signing.signer(snapshot, "grp", made, owners) == expected
