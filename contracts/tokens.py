"""Service tokens and API tokens: generated once, stored and compared as HMAC digests."""

from __future__ import annotations

import hashlib
import hmac
import secrets

SERVICE_TOKEN_PREFIX = "wsk-"
API_TOKEN_PREFIX = "wat-"
API_KEY_PREFIX = "wak-"  # API keys: call models through the gateway, with their own limits


def new_token(prefix: str) -> str:
    """A fresh token; the plaintext is shown to the user once and never stored."""
    return prefix + secrets.token_urlsafe(32)


def token_digest(key: bytes, token: str) -> str:
    """HMAC-SHA256 of the token under the deployment's secret key, hex encoded.

    A keyed digest (not a bare hash) means a leaked database alone does not let
    anyone check guesses offline.
    """
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token in an Authorization header: `Bearer <token>` or the bare token (EAS style)."""
    if not authorization:
        return None
    value = authorization.strip()
    scheme, _, rest = value.partition(" ")
    if rest and scheme.lower() == "bearer":
        value = rest.strip()
    return value or None


def digest_matches(expected: str, actual: str) -> bool:
    return hmac.compare_digest(expected, actual)
