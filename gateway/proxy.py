"""Forwarding one request to an engine instance and streaming its answer back.

The proxying happens inside the ASGI response (ProxyResponse) rather than in the route
handler, because that is the only place that can watch the client's connection: if the
client goes away at any point (while the engine is still computing a non-streamed answer,
or mid-stream) the upstream request is cancelled and its connection closed, which is how
an OpenAI-compatible engine learns to abort the generation and free its batch slot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import anyio
import httpx
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from contracts.routing import RoutedInstance, RoutedService
from gateway import errors
from gateway.balancer import Balancer

log = logging.getLogger(__name__)

# RFC 9110 section 7.6.1: meaningful for one connection only, never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# The token is for the gateway; engines must never see it (nor log it).
_REQUEST_DROP = HOP_BY_HOP | {"host", "authorization", "content-length"}
# uvicorn writes its own; passing the engine's too would duplicate them.
_RESPONSE_DROP = HOP_BY_HOP | {"server", "date", "x-wharf-instance"}

INSTANCE_HEADER = "x-wharf-instance"


def _connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Header names listed in Connection, which are hop-by-hop for this message too."""
    names: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            names.update(token.strip().lower() for token in value.split(","))
    return names


def upstream_request_headers(headers: Headers, client_host: str | None) -> list[tuple[str, str]]:
    items = headers.items()
    drop = _REQUEST_DROP | _connection_tokens(items)
    kept = [(name, value) for name, value in items if name.lower() not in drop]
    if client_host:
        prior = headers.get("x-forwarded-for")
        kept = [(n, v) for n, v in kept if n.lower() != "x-forwarded-for"]
        kept.append(("x-forwarded-for", f"{prior}, {client_host}" if prior else client_host))
    return kept


def client_response_headers(
    upstream: httpx.Response, instance: RoutedInstance
) -> list[tuple[bytes, bytes]]:
    items = upstream.headers.multi_items()
    drop = _RESPONSE_DROP | _connection_tokens(items)
    kept = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in items
        if name.lower() not in drop
    ]
    if "transfer-encoding" in upstream.headers:
        # The body is re-framed by our server, so a length the engine sent alongside
        # chunked encoding (invalid anyway) must not leak through.
        kept = [(n, v) for n, v in kept if n != b"content-length"]
    kept.append((INSTANCE_HEADER.encode(), instance.name.encode("latin-1")))
    return kept


class ProxyResponse(Response):
    """An ASGI response that picks an instance, forwards the request and relays the answer."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        balancer: Balancer,
        service: RoutedService,
        method: str,
        path: str,
        query: bytes,
        headers: list[tuple[str, str]],
        body: bytes,
        timeout: float,
    ) -> None:
        self.client = client
        self.balancer = balancer
        self.service = service
        self.method = method
        self.path = path if path.startswith("/") else "/" + path
        self.query = query
        self.forward_headers = headers
        self.request_body = body
        self.timeout = timeout
        self.status_code = 0  # known once the engine answers
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def cancel_on_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(cancel_on_disconnect)
            await self._relay(scope, receive, send)
            group.cancel_scope.cancel()

    def _url(self, instance: RoutedInstance) -> str:
        url = instance.url.rstrip("/") + self.path
        return f"{url}?{self.query.decode('latin-1')}" if self.query else url

    async def _relay(self, scope: Scope, receive: Receive, send: Send) -> None:
        tried: set[str] = set()
        last_error: httpx.HTTPError | None = None
        while instance := self.balancer.pick(self.service.name, self.service.instances, tried):
            tried.add(instance.url)
            self.balancer.acquire(instance.url)
            try:
                upstream = await self._open(instance)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # The engine never got the request, so another instance can safely take it.
                self.balancer.release(instance.url)
                log.warning("instance %s (%s) unreachable: %r", instance.name, instance.url, exc)
                last_error = exc
                continue
            except httpx.TimeoutException:
                self.balancer.release(instance.url)
                log.warning("instance %s timed out after %gs", instance.name, self.timeout)
                await self._error(
                    errors.upstream_timeout(self.service.name, self.timeout), scope, receive, send
                )
                return
            except httpx.HTTPError as exc:
                # The request may have reached the engine; retrying could run it twice.
                self.balancer.release(instance.url)
                log.warning("instance %s failed before answering: %r", instance.name, exc)
                await self._error(errors.upstream_failed(self.service.name), scope, receive, send)
                return
            except BaseException:
                self.balancer.release(instance.url)
                raise
            try:
                await self._stream(upstream, instance, send)
            finally:
                self.balancer.release(instance.url)
                # Shielded: when the client left, this scope is cancelled, and the close is
                # what tells the engine to abort.
                with anyio.CancelScope(shield=True):
                    await upstream.aclose()
            return
        if isinstance(last_error, httpx.ConnectTimeout):
            response = errors.upstream_timeout(self.service.name, self.timeout)
        else:
            response = errors.upstream_unreachable(self.service.name)
        await self._error(response, scope, receive, send)

    async def _open(self, instance: RoutedInstance) -> httpx.Response:
        request = self.client.build_request(
            self.method,
            self._url(instance),
            headers=self.forward_headers,
            content=self.request_body,
        )
        return await self.client.send(request, stream=True)

    async def _stream(self, upstream: httpx.Response, instance: RoutedInstance, send: Send) -> None:
        self.status_code = upstream.status_code
        await send(
            {
                "type": "http.response.start",
                "status": upstream.status_code,
                "headers": client_response_headers(upstream, instance),
            }
        )
        try:
            # Raw bytes, relayed per network read: no decoding (content-encoding passes through
            # untouched) and no buffering (each SSE event reaches the client as it is made).
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            # Too late for an error status. Returning without finishing the body makes the
            # server drop the connection, so the client sees a truncated answer, not a
            # complete-looking one.
            log.warning("instance %s broke off its answer: %r", instance.name, exc)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _error(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
        await response(scope, receive, send)
