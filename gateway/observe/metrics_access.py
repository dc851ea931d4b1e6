"""Who may read the gateway's metrics: they name every service and its traffic, so GET /metrics
is closed to callers.

- On the gateway's own port, /metrics answers only a scraper that sends the operator's token,
  `Authorization: Bearer <WHARF_GATEWAY_METRICS_TOKEN>` (Prometheus: `authorization:
  {credentials_file: ...}`); without a token configured it answers no one (403).
- WHARF_GATEWAY_METRICS_LISTEN (host:port) opens a listener that serves /metrics alone,
  without a token: the operator chose who reaches that address (127.0.0.1, a port no load
  balancer or ingress forwards). It is a small HTTP/1.1 server on asyncio: one request per
  connection, its head bounded, so it is no second way in.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
from collections.abc import Callable

from starlette.responses import Response

from gateway import errors

log = logging.getLogger(__name__)

Exposition = Callable[[], tuple[bytes, str]]

# A scraper's request head is a few hundred bytes; a peer that sends more, or nothing for
# this long, is dropped.
_MAX_HEAD = 8 * 1024
_READ_TIMEOUT_S = 10.0


def metrics_response(token: str, authorization: str | None, exposition: Exposition) -> Response:
    """The answer to GET /metrics on the gateway's own port."""
    if not token:
        return errors.metrics_closed()
    scheme, _, presented = (authorization or "").partition(" ")
    if not presented or scheme.lower() != "bearer":
        return errors.metrics_token_missing()
    if not hmac.compare_digest(presented.strip().encode(), token.encode()):
        return errors.metrics_token_invalid()
    body, content_type = exposition()
    return Response(body, media_type=content_type)


class MetricsListener:
    """GET /metrics, and nothing else, on an address of the operator's choosing."""

    def __init__(self, host: str, port: int, exposition: Exposition) -> None:
        self._host, self._port = host, port
        self._exposition = exposition
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        # With `--workers N` every worker listens on the same port (the kernel spreads the
        # scrapes, each worker counting alone, as on the main port).
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=_MAX_HEAD,
            reuse_port=hasattr(socket, "SO_REUSEPORT"),
        )  # fmt: skip
        log.info("metrics listener on %s:%d", self._host, self._port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            writer.write(self._answer(head.split(b"\r\n", 1)[0]))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass  # not a request this listener answers: the connection is dropped
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _answer(self, request_line: bytes) -> bytes:
        method, _, rest = request_line.partition(b" ")
        target = rest.partition(b" ")[0].partition(b"?")[0]
        if target != b"/metrics":
            return _plain(404, "Not Found", errors.listener_route_not_found())
        if method not in (b"GET", b"HEAD"):
            return _plain(405, "Method Not Allowed", errors.listener_method_not_allowed())
        body, content_type = self._exposition()
        head = _head(200, "OK", content_type, len(body))
        return head if method == b"HEAD" else head + body


def _plain(status: int, reason: str, error: dict) -> bytes:
    body = json.dumps(error).encode()
    return _head(status, reason, "application/json", len(body)) + body


def _head(status: int, reason: str, content_type: str, length: int) -> bytes:
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {length}\r\nconnection: close\r\n\r\n"
    ).encode()
