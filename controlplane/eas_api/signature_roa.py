"""Alibaba's older ROA signature, checked: pure, no Django. Terraform's alicloud provider
(its `roaRequest`, alibabacloud-go/tea-roa) and EAS's SDKs with `signature_algorithm="v2"`
sign this way:

    Authorization: acs <AccessKeyId>:<base64 HMAC-SHA1(secret, string to sign)>
    string to sign: METHOD \n Accept \n Content-MD5 \n Content-Type \n Date \n
                    "x-acs-name:value\n" for each x-acs- header, sorted
                    path[?key=value&key…] (the query sorted by key, values as sent)

It covers no body unless Content-MD5 is sent, so the body is checked against Content-MD5
where there is one; a stale Date and a reused x-acs-signature-nonce are refused as for ACS3.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

from controlplane.eas_api.signature import MAX_SKEW, SignatureRefusedError, canonical_path

SCHEME = "acs"


def parse_authorization(value: str) -> tuple[str, str]:
    """(AccessKeyId, signature) of `acs ID:SIGNATURE`."""
    key_id, sep, signed = value.removeprefix(f"{SCHEME} ").strip().partition(":")
    if not (sep and key_id and signed):
        raise SignatureRefusedError(
            "IncompleteSignature", "Authorization must be `acs <AccessKeyId>:<signature>`"
        )
    return key_id, signed


def check_date(sent: str | None, now: datetime) -> None:
    """The Date header (RFC 1123, GMT) within MAX_SKEW of `now` (aware)."""
    try:
        when = parsedate_to_datetime(sent or "")
    except (TypeError, ValueError):
        raise SignatureRefusedError(
            "InvalidTimeStamp.Format", "Date must be like Sat, 31 Jan 2026 12:00:00 GMT"
        ) from None
    if when.tzinfo is None or abs(now - when) > MAX_SKEW:
        raise SignatureRefusedError(
            "InvalidTimeStamp.Expired",
            f"Date {sent} is more than {MAX_SKEW.seconds // 60} minutes from the server's "
            f"time {now:%a, %d %b %Y %H:%M:%S GMT}; correct the client's clock",
        )


def check_body(headers: Mapping[str, str], body: bytes) -> None:
    sent = headers.get("content-md5")
    if sent is None:
        return
    actual = base64.b64encode(hashlib.md5(body).digest()).decode()  # noqa: S324 (the scheme's)
    if not hmac.compare_digest(sent, actual):
        raise SignatureRefusedError("SignatureDoesNotMatch", "the body does not match Content-MD5")


def string_to_sign(
    method: str, path: str, query: Iterable[tuple[str, str]], headers: Mapping[str, str]
) -> str:
    """What the signer signed. `path` and `query` decoded, `headers` by lower-case name."""
    fixed = [headers.get(name, "") for name in ("accept", "content-md5", "content-type", "date")]
    acs = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-acs-"))
    pairs = sorted(query)
    resource = canonical_path(path)
    if pairs:
        resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in pairs)
    return "\n".join([method, *fixed]) + "\n" + acs + resource


def check_signature(signed: str, secret: str, to_sign: str) -> None:
    digest = hmac.new(secret.encode(), to_sign.encode(), hashlib.sha1).digest()
    if not hmac.compare_digest(base64.b64encode(digest).decode(), signed):
        raise SignatureRefusedError(
            "SignatureDoesNotMatch",
            "the request's signature does not match its AccessKeySecret; check the secret "
            "and that nothing between the client and Wharf rewrites the request",
        )


def check_any(signed: str, secret: str, strings: list[str]) -> None:
    """Signed over one of `strings` (what a request may have been before a server's defaults)."""
    for to_sign in strings[:-1]:
        try:
            return check_signature(signed, secret, to_sign)
        except SignatureRefusedError:
            continue
    check_signature(signed, secret, strings[-1])
