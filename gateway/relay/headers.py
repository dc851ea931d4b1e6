"""The headers that cross the gateway: what an engine is sent of the client's, and what the
client is sent of the engine's (RFC 9110's hop-by-hop rules, the caller's token withheld)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from starlette.datastructures import Headers

from contracts.routing import RoutedInstance
from gateway.relay.request_id import HEADER as REQUEST_ID

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
# The token is for the gateway; engines must never see it (nor log it): they get their own
# key instead (gateway.engine_auth). The gateway has the whole body before it calls an
# engine, so the client's Expect is answered already. The request's id is the gateway's
# choice (gateway.relay.request_id), not necessarily the client's.
_REQUEST_DROP = HOP_BY_HOP | {"host", "authorization", "content-length", "expect", REQUEST_ID}
# uvicorn writes its own; passing the engine's too would duplicate them. The request's id
# is added to every answer by gateway.relay.request_id (vLLM echoes it: it would come twice).
_RESPONSE_DROP = frozenset(
    name.encode() for name in HOP_BY_HOP | {"server", "date", "x-wharf-instance", REQUEST_ID}
)

INSTANCE_HEADER = "x-wharf-instance"


def _connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Header names listed in Connection, which are hop-by-hop for this message too."""
    names: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            names.update(token.strip().lower() for token in value.split(","))
    return names


def upstream_request_headers(
    headers: Headers,
    client_host: str | None,
    drop: frozenset[str] = frozenset(),
    request_id: str | None = None,
) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones, the token and `drop`, plus X-Forwarded-For
    and the request's id."""
    items = headers.items()
    dropped = _REQUEST_DROP | drop | _connection_tokens(items)
    kept = [(name, value) for name, value in items if name.lower() not in dropped]
    if client_host:
        prior = headers.get("x-forwarded-for")
        kept = [(n, v) for n, v in kept if n.lower() != "x-forwarded-for"]
        kept.append(("x-forwarded-for", f"{prior}, {client_host}" if prior else client_host))
    if request_id:
        kept.append((REQUEST_ID, request_id))
    return kept


def client_response_headers(
    raw: Sequence[tuple[bytes, bytes]], instance: RoutedInstance, reframed: bool, status: int = 200
) -> list[tuple[bytes, bytes]]:
    """The engine's headers for the client; `reframed`: the body is not the engine's length."""
    connection = {
        token.strip().lower().encode()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.decode("latin-1").split(",")
    }
    drop = _RESPONSE_DROP | connection
    kept = [(name.lower(), value) for name, value in raw if name.lower() not in drop]
    if reframed or status in (204, 304) or any(n.lower() == b"transfer-encoding" for n, _ in raw):
        # The body is re-framed by our server, so a length the engine sent alongside
        # chunked encoding (invalid anyway), or for bytes we removed, must not leak through;
        # nor one a 204 or 304 names (no body follows; a 304's is the representation's),
        # for which our server would wait.
        kept = [(n, v) for n, v in kept if n != b"content-length"]
    kept.append((INSTANCE_HEADER.encode(), instance.name.encode("latin-1")))
    return kept
