"""EAS's signed call, as eas-prediction's PredictClient makes it when it is given a token and no
custom URL: the token never travels; the request carries

    Content-MD5: <md5 of the body, hex>
    Date: <RFC 1123, GMT>
    Authorization: EAS <base64 HMAC-SHA1(key=token,
                        "POST\\n<Content-MD5>\\n<Content-Type>\\n<Date>\\n<path>")>

Pure: what is signed, whether a signature is a token's, whether a Date is fresh and whether a
body is the one its Content-MD5 names. The gateway (gateway.eas.signing) does the I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

SCHEME = "EAS"
# A signed call is refused when its Date is further than this from the gateway's clock, either
# way: the window bounds how long a captured call can be replayed, and allows for clocks a few
# minutes apart (AWS's Signature V4 allows 15 minutes as well). PredictClient writes its local
# time labelled GMT, so its host's clock must be in UTC.
DATE_WINDOW_S = 15 * 60
_SHA1_BYTES = 20


@dataclass(frozen=True)
class SignedCall:
    """What a signed call says of itself: the signature and the header values it covers."""

    signature: bytes
    method: str
    content_md5: str
    content_type: str
    date: str
    path: str

    def message(self) -> bytes:
        return string_to_sign(self.method, self.content_md5, self.content_type, self.date,
                              self.path)  # fmt: skip


def signature_of(authorization: str | None) -> bytes | None:
    """The signature in `Authorization: EAS <base64>`; None when the header is no signature
    (a token: tokens hold no space) or one that is not base64 of an HMAC-SHA1."""
    scheme, _, value = (authorization or "").strip().partition(" ")
    if scheme != SCHEME or not value.strip():
        return None
    try:
        signature = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return b""  # signed, but unreadably: no token signs it
    return signature if len(signature) == _SHA1_BYTES else b""


def is_signed(authorization: str | None) -> bool:
    """Whether the header is EAS's signature form (well formed or not)."""
    scheme, _, value = (authorization or "").strip().partition(" ")
    return scheme == SCHEME and bool(value.strip())


def string_to_sign(method: str, content_md5: str, content_type: str, date: str, path: str) -> bytes:
    # PredictClient strips the whole string before signing it: so do we.
    return f"{method}\n{content_md5}\n{content_type}\n{date}\n{path}".strip().encode()


def sign(token: str, message: bytes) -> str:
    """The Authorization value a token's holder sends for `message`."""
    digest = hmac.new(token.encode(), message, hashlib.sha1).digest()
    return f"{SCHEME} {base64.b64encode(digest).decode()}"


def signed_by(token: bytes, call: SignedCall) -> bool:
    """Whether `token` made the call's signature (in constant time)."""
    expected = hmac.new(token, call.message(), hashlib.sha1).digest()
    return hmac.compare_digest(expected, call.signature)


def date_problem(date: str, now: float, window: float = DATE_WINDOW_S) -> str | None:
    """Why a signed call's Date is refused, or None when it is within `window` of `now`."""
    if not date:
        return "it has no Date header"
    try:
        sent = parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return f"its Date '{date[:64]}' is not an HTTP date (RFC 1123, e.g. " \
               "'Sat, 28 Nov 2026 12:00:00 GMT')"  # fmt: skip
    skew = sent - now
    if abs(skew) > window:
        when = "old" if skew < 0 else "ahead of the gateway's clock"
        return (f"its Date is {abs(skew) / 60:.0f} minutes {when}; signed calls are taken "
                f"within {window / 60:.0f} minutes of it (check the caller's clock)")  # fmt: skip
    return None


def body_matches(content_md5: str, body: bytes) -> bool:
    """Whether `body` is the one Content-MD5 names: hex as PredictClient writes it, or base64
    as RFC 1864 does."""
    digest = hashlib.md5(body, usedforsecurity=False)
    named = content_md5.strip()
    return hmac.compare_digest(named.lower(), digest.hexdigest()) or hmac.compare_digest(
        named, base64.b64encode(digest.digest()).decode()
    )
