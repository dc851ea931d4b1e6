"""ACS3-HMAC-SHA256, Alibaba Cloud's V3 request signature, checked: pure, no Django.

The signer (alibabacloud-tea-openapi's `get_authorization`) hashes a canonical request --

    METHOD \n path \n sorted query \n "name:value\n" per signed header \n signed names \n body hash

-- writes `ACS3-HMAC-SHA256 <hex sha256 of it>` and signs that with HMAC-SHA256 keyed by the
AccessKeySecret, sending `Authorization: ACS3-HMAC-SHA256 Credential=<id>,SignedHeaders=<a;b>,
Signature=<hex>`. The verifier rebuilds the same string from what it received. A refusal
carries the code and HTTP status Alibaba's gateway answers with.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

ALGORITHM = "ACS3-HMAC-SHA256"
MAX_SKEW = timedelta(minutes=15)  # x-acs-date this far from the server's clock is refused
# Signed always, so no one can move a signature to another time, body or host.
MUST_SIGN = ("host", "x-acs-content-sha256", "x-acs-date")


class SignatureRefusedError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class Credential:
    key_id: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str | None) -> Credential:
    """The three parts of an ACS3 Authorization header; IncompleteSignature otherwise."""
    algorithm, _, rest = (value or "").strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureRefusedError(
            "IncompleteSignature",
            f"Authorization must be signed with {ALGORITHM} (an access key pair: "
            "`manage.py create_access_key`)",
        )
    parts = dict(item.strip().partition("=")[::2] for item in rest.split(","))
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not parts.get(name)]
    if missing:
        lacks = f"Authorization lacks {', '.join(missing)}"
        raise SignatureRefusedError("IncompleteSignature", lacks)
    signed = tuple(parts["SignedHeaders"].split(";"))
    if unsigned := [name for name in MUST_SIGN if name not in signed]:
        raise SignatureRefusedError(
            "IncompleteSignature", f"SignedHeaders must include {', '.join(unsigned)}"
        )
    return Credential(parts["Credential"], signed, parts["Signature"])


def check_date(sent: str | None, now: datetime) -> None:
    """x-acs-date (ISO 8601, UTC) within MAX_SKEW of `now` (aware)."""
    try:
        when = datetime.strptime(sent or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=now.tzinfo)
    except ValueError:
        raise SignatureRefusedError(
            "InvalidTimeStamp.Format", "x-acs-date must be like 2026-01-31T12:00:00Z"
        ) from None
    if abs(now - when) > MAX_SKEW:
        raise SignatureRefusedError(
            "InvalidTimeStamp.Expired",
            f"x-acs-date {sent} is more than {MAX_SKEW.seconds // 60} minutes from the "
            f"server's time {now:%Y-%m-%dT%H:%M:%SZ}; correct the client's clock",
        )


def _encode(text: str) -> str:
    return quote(text, safe="~", encoding="utf-8")


def canonical_path(path: str) -> str:
    """A decoded path encoded as the SDKs encode each segment of theirs."""
    return "/".join(_encode(segment) for segment in path.split("/")) or "/"


def canonical_request(
    method: str, path: str, query: Iterable[tuple[str, str]], headers: Mapping[str, str],
    signed: Iterable[str], payload_hash: str,
) -> str:  # fmt: skip
    """The string the signer hashed. `path` and `query` decoded (as a server receives them),
    `headers` by lower-case name."""
    pairs = sorted((_encode(k), _encode(v)) for k, v in query)
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
    signed = list(signed)
    lines = "".join(f"{name}:{headers.get(name, '').strip()}\n" for name in signed)
    return "\n".join(
        [method, canonical_path(path), canonical_query, lines, ";".join(signed), payload_hash]
    )


def signature(secret: str, canonical: str) -> str:
    """What the signer puts after Signature= for `canonical` under `secret`."""
    hashed = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"{ALGORITHM}\n{hashed}"
    return hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()


def check_body(headers: Mapping[str, str], body: bytes) -> str:
    """The body's hash, which x-acs-content-sha256 must equal."""
    actual = hashlib.sha256(body).hexdigest()
    if not hmac.compare_digest(headers.get("x-acs-content-sha256", ""), actual):
        raise SignatureRefusedError(
            "SignatureDoesNotMatch", "the body does not match its x-acs-content-sha256"
        )
    return actual


def check_signature(credential: Credential, secret: str, canonical: str) -> None:
    if not hmac.compare_digest(signature(secret, canonical), credential.signature):
        raise SignatureRefusedError(
            "SignatureDoesNotMatch",
            "the request's signature does not match its AccessKeySecret; check the secret "
            "and that nothing between the client and Wharf rewrites the request",
        )
