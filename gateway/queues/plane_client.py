"""The gateway's calls to the control plane's queue routes (controlplane.queues.internal), under
the plane key (contracts.plane_link)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx

from contracts.plane_link import CALLER_KEY, HEADER, plane_key

QUEUE_PATH = "x-wharf-queue-path"
TIMEOUT_S = 10.0
WAIT_MARGIN_S = 5.0  # beyond a long poll's own wait


class PlaneError(Exception):
    """The control plane could not be reached or refused the gateway's call."""


class PlaneClient:
    def __init__(self, api_url: str, secret_key: bytes) -> None:
        self._client = httpx.AsyncClient(
            base_url=api_url.rstrip("/"),
            timeout=TIMEOUT_S,
            headers={HEADER: plane_key(secret_key)},
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=32),
        )

        # Streamed files and batches calls: a fresh connection each (they are few), as a
        # streamed body cannot be sent again on a kept-alive connection the server closed.
        self._streams = httpx.AsyncClient(
            base_url=api_url.rstrip("/"),
            timeout=TIMEOUT_S,
            headers={HEADER: plane_key(secret_key)},
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=0),
        )

    async def close(self) -> None:
        await self._client.aclose()
        await self._streams.aclose()

    async def relay(
        self,
        method: str,
        service: str,
        queue: str,
        query: str,
        body: bytes,
        headers: dict[str, str],
        wait_s: float,
    ) -> httpx.Response:
        """A caller's queue API call, as it came."""
        url = f"/internal/queues/{service}/{queue}" + (f"?{query}" if query else "")
        try:
            return await self._client.request(
                method, url, content=body, headers=headers, timeout=wait_s + TIMEOUT_S
            )
        except httpx.HTTPError as exc:
            raise PlaneError(f"the control plane did not answer: {exc!r}") from exc

    async def openai(
        self,
        method: str,
        path: str,
        query: str,
        body: AsyncIterator[bytes],
        headers: dict[str, str],
        key_id: str,
        timeout: float,
    ) -> httpx.Response:
        """A caller's /v1/files or /v1/batches call, streamed both ways (the caller closes
        the answer)."""
        url = f"/internal{path}" + (f"?{query}" if query else "")
        request = self._streams.build_request(
            method, url, content=body, headers={**headers, CALLER_KEY: key_id}, timeout=timeout
        )
        try:
            return await self._streams.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise PlaneError(f"the control plane did not answer: {exc!r}") from exc

    async def _json(
        self, method: str, url: str, timeout: float = TIMEOUT_S, **kwargs: Any
    ) -> dict[str, Any]:
        try:
            answer = await self._client.request(method, url, timeout=timeout, **kwargs)
        except httpx.HTTPError as exc:
            raise PlaneError(f"the control plane did not answer: {exc!r}") from exc
        if answer.status_code != 200:
            raise PlaneError(f"the control plane answered {answer.status_code}: {answer.text}")
        data = answer.json()
        if not isinstance(data, dict):
            raise PlaneError("the control plane's answer is not a JSON object")
        return data

    async def watch(
        self, service: str, queue: str, params: dict[str, str], wait_s: float
    ) -> dict[str, Any]:
        """A subscriber's next items (and which of those sent were committed)."""
        return await self._json(
            "GET",
            f"/internal/queues/{service}/{queue}/watch",
            timeout=wait_s + WAIT_MARGIN_S,
            params={**params, "wait": str(wait_s)},
        )

    async def lease(
        self,
        service: str,
        holder: str,
        instances: list[str],
        lease_s: float,
        room: dict[str, int] | None = None,
        held_keys: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Items for `instances`; `room`: how many more each may take now (None: its window);
        none of the batch requests of `held_keys` (API keys at their rpm or tpm)."""
        data = await self._json(
            "POST",
            "/internal/queues/lease",
            json={"service": service, "holder": holder, "instances": instances,
                  "lease_s": lease_s, "room": room, "held_keys": held_keys or []},
        )  # fmt: skip
        return list(data.get("items", []))

    async def finish(
        self, index: int, holder: str, status: int, body: bytes, content_type: str
    ) -> bool:
        data = await self._json(
            "POST",
            "/internal/queues/finish",
            json={
                "index": index,
                "holder": holder,
                "status": status,
                "data": base64.b64encode(body).decode(),
                "content_type": content_type,
            },
        )
        return bool(data.get("taken"))

    async def give_back(self, index: int, holder: str, reason: str, delivered: bool = True) -> bool:
        """An item its instance could not finish (`delivered` False: never sent to it)."""
        data = await self._json(
            "POST",
            "/internal/queues/finish",
            json={"index": index, "holder": holder, "status": None, "reason": reason,
                  "delivered": delivered},
        )  # fmt: skip
        return bool(data.get("taken"))

    async def renew(self, holder: str, indexes: list[int], lease_s: float) -> None:
        await self._json(
            "POST",
            "/internal/queues/renew",
            json={"holder": holder, "indexes": indexes, "lease_s": lease_s},
        )


def relay_headers(content_type: str, accept: str, caller_key: str, path: str) -> dict[str, str]:
    """What the store needs to know of a caller's call beyond its method, query and body."""
    return {
        "content-type": content_type,
        "accept": accept,
        CALLER_KEY: caller_key,
        QUEUE_PATH: path,
    }
