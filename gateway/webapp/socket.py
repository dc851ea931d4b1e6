"""A web application's WebSockets (Gradio's queue, ComfyUI's progress), relayed message by
message between the browser and the instance its pass's session is on (gateway.webapp.pages).

Refused before the handshake completes (uvicorn answers 403) without a pass to the service,
or when the page that opens it is another site's (its Origin is not the gateway's own host):
a browser sends the pass's cookie with a WebSocket's handshake whatever page opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlsplit

from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Subprotocol

from contracts import engine_tls
from gateway.webapp.pages import app_headers, app_path, pass_of, pick_instance, web_service

log = logging.getLogger(__name__)

MAX_MESSAGE = 16 * 1024 * 1024  # bytes of one message either way (an image, a batch of them)
OPEN_TIMEOUT = 10.0
_NOT_AUTHORIZED = 4401  # closing codes 4000-4999 are the application's own (RFC 6455)
_UNAVAILABLE = 1013  # "try again later": no instance, or it refused the handshake
# Codes a close frame may carry (1005 and 1006 only say that none came).
SENDABLE_CODES = frozenset(range(1000, 5000)) - {1004, 1005, 1006, 1015}


def same_host(origin: str | None, host: str | None) -> bool:
    """Whether the page that opens the socket came from the gateway's own host (no Origin:
    not a browser's page, which always sends one)."""
    if not origin:
        return True
    return host is not None and urlsplit(origin).netloc.lower() == host.lower()


def _upstream_url(instance_url: str, path: str, query: bytes) -> str:
    base = instance_url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return base + path + (f"?{query.decode('latin-1')}" if query else "")


async def web_socket(websocket: WebSocket) -> None:
    service = web_service(websocket)
    origin, host = websocket.headers.get("origin"), websocket.headers.get("host")
    if isinstance(service, Response) or not same_host(origin, host):
        await websocket.close(_NOT_AUTHORIZED)
        return
    web_pass = pass_of(websocket, service.name)
    if web_pass is None or not service.instances:
        await websocket.close(_NOT_AUTHORIZED if web_pass is None else _UNAVAILABLE)
        return
    instance = pick_instance(service.instances, web_pass.session)
    headers = [
        (name, value)
        for name, value in app_headers(websocket, service.name, instance)
        if not name.lower().startswith("sec-websocket")
    ]
    query: bytes = websocket.scope.get("query_string", b"")
    url = _upstream_url(instance.url, app_path(websocket), query)
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
    protocols = [Subprotocol(p) for p in offered if p] or None
    try:
        upstream = await connect(
            url, additional_headers=headers, subprotocols=protocols, max_size=MAX_MESSAGE,
            open_timeout=OPEN_TIMEOUT, compression=None,
            # An https:// front (contracts.engine_tls): wss://, verified by its CA.
            ssl=engine_tls.client_context() if url.startswith("wss://") else None,
        )  # fmt: skip
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        log.warning("web socket to %s (%s) refused: %r", instance.name, instance.url, exc)
        await websocket.close(_UNAVAILABLE)
        return
    await websocket.accept(subprotocol=upstream.subprotocol)
    await relay(websocket, upstream)


async def relay(websocket: WebSocket, upstream: ClientConnection) -> None:
    """Messages both ways until either side closes; the other is closed with its code."""

    async def down() -> None:
        async for message in upstream:
            if isinstance(message, str):
                await websocket.send_text(message)
            else:
                await websocket.send_bytes(message)

    async def up() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text, data = message.get("text"), message.get("bytes")
            await upstream.send(text if text is not None else data or b"")

    tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(
                asyncio.CancelledError, ConnectionClosed, WebSocketDisconnect, RuntimeError
            ):
                await task
        code = upstream.close_code or 1000
        await upstream.close()
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(code if code in SENDABLE_CODES else 1000)
