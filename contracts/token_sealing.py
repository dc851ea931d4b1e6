"""Tokens sealed for the gateways, so that EAS's signed calls can be checked.

A signed call (contracts.eas_signature) proves it holds the token by an HMAC keyed with the
token itself, so whoever checks it needs the token, while Wharf otherwise keeps only keyed
digests. Each service token and API key is therefore also kept sealed: Fernet (AES-128-CBC
with HMAC-SHA256) under a key derived from the token key (WHARF_TOKEN_KEY), which the control
plane and the gateways hold and nothing else. The control plane seals a token once, when it
is issued; the sealed value rides in the routing snapshot; a gateway opens it in memory when
it loads the snapshot. Redis, the database and their backups only ever see it sealed, and a
leaked database alone opens nothing, as with the digests.

Deriving the key (rather than a new setting) keeps one secret to deploy and rotate: changing
WHARF_TOKEN_KEY already invalidates every digest, and so, consistently, every sealed token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken

PREFIX = "wharf-token:v1:"
_PURPOSE = b"wharf: tokens sealed for the gateways, v1"


def sealing_key(secret_key: bytes) -> Fernet:
    """The Fernet key derived from the token key (a keyed hash names its one purpose)."""
    derived = hmac.new(secret_key, _PURPOSE, hashlib.sha256).digest()
    return Fernet(base64.urlsafe_b64encode(derived))


def seal_token(key: Fernet, token: str) -> str:
    return PREFIX + key.encrypt(token.encode()).decode()


def open_token(key: Fernet, sealed: str) -> bytes | None:
    """The token, or None when `sealed` is not one this key sealed."""
    if not sealed.startswith(PREFIX):
        return None
    try:
        return key.decrypt(sealed.removeprefix(PREFIX).encode())
    except InvalidToken:
        return None
