"""Engine keys: the API key each engine instance requires, known only to Wharf.

An engine Wharf starts refuses its OpenAI routes without `Authorization: Bearer <key>`, so
calls reach it only through a gateway, which checks tokens and limits and counts usage. The
key is derived rather than stored: an HMAC of the instance's name under the deployment's
secret key, so the worker that starts the instance and every gateway compute the same key
with nothing new to keep, publish or rotate (a new instance gets a new key).
"""

from __future__ import annotations

import hashlib
import hmac

ENGINE_KEY_PREFIX = "wek-"
# Keeps engine keys apart from token digests (contracts.tokens), HMACs under the same secret:
# no token starts with this, so no engine key is ever the digest of a token, or one of them.
_PURPOSE = b"engine:"


def engine_key(secret: bytes, instance: str) -> str:
    """The key of the engine instance named `instance`: "wek-" and 64 hex digits."""
    mac = hmac.new(secret, _PURPOSE + instance.encode(), hashlib.sha256)
    return ENGINE_KEY_PREFIX + mac.hexdigest()
