from __future__ import annotations

import httpx


def is_healthy(url: str, path: str, timeout: float = 2.0) -> bool:
    """An instance is ready when its engine's health endpoint answers 200."""
    try:
        return httpx.get(url.rstrip("/") + path, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False
