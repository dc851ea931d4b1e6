"""The gateways' calls to the control plane's internal routes (the queues' store:
controlplane.queues.internal): authenticated by a key derived from the token key
(WHARF_TOKEN_KEY), which the control plane and the gateways hold and nothing else, as the sealed
tokens' key is (contracts.token_sealing). Rotating the token key rotates it too."""

from __future__ import annotations

import hashlib
import hmac

_PURPOSE = b"wharf: the gateways' calls to the control plane, v1"
HEADER = "x-wharf-plane-key"
CALLER_KEY = "x-wharf-caller-key"  # the API key id the gateway authorized ("" a service token)


def plane_key(secret_key: bytes) -> str:
    """The key a gateway presents in HEADER."""
    return hmac.new(secret_key, _PURPOSE, hashlib.sha256).hexdigest()


def is_plane_key(secret_key: bytes, presented: str) -> bool:
    return hmac.compare_digest(plane_key(secret_key), presented)
