from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx

from contracts import engine_tls


def is_healthy(url: str, path: str, timeout: float = 2.0, key: str = "") -> bool:
    """Ready when the engine's health endpoint answers 2xx or 3xx, asked with its engine `key`
    (its front lets no one in without it: gateway.front); with no health path (a custom
    command without a front), when its port accepts a connection, as EAS's default TCP check
    does."""
    if not path:
        parts = urlsplit(url)
        try:
            with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout):
                return True
        except OSError:
            return False
    try:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        answer = httpx.get(url.rstrip("/") + path, timeout=timeout, headers=headers,
                           verify=engine_tls.client_context())  # fmt: skip
        return 200 <= answer.status_code < 400
    except httpx.HTTPError:
        return False
