"""When a kept-alive connection to an engine may be used, and a request sent on it again.

Engines close idle connections on a timer (uvicorn's keep-alive: vLLM's
VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s), so a connection can close just as the gateway reuses it.
The rules are those of well-kept HTTP clients (Go's net/http, urllib3, aiohttp): a pooled
connection is checked before use (one the engine closed is passed over: nothing was sent
on it), and a request that met a close with no byte of an answer goes out once more only
if sending it twice does what sending it once does, or if the engine cannot have read it.
"""

from __future__ import annotations

import asyncio
import select

# A reused connection the engine closed this soon after a request went out on it, with no byte
# of an answer, was closed by its idle timer as the request arrived: no engine reads a request
# and closes unanswered this fast unless it never read it. Such requests go out once more.
UNREAD_WINDOW_S = 0.05
# RFC 9110 9.2.2: methods whose repetition changes nothing.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


def may_resend(replayable: bool, heard: bool, sent_at: float, closed_at: float) -> bool:
    """Whether a request on a reused connection that closed at `closed_at` (loop time; 0:
    open) goes out again: nothing of an answer was `heard`, and it is `replayable` or the
    close came too soon after sending for the engine to have acted on it."""
    if heard or not closed_at:
        return False
    return replayable or closed_at - sent_at <= UNREAD_WINDOW_S


def replayable(method: str, headers: list[tuple[str, str]]) -> bool:
    """Whether sending the request twice does what sending it once does (RFC 9110 9.2.2; an
    Idempotency-Key says so of a POST, as Go's net/http reads it)."""
    if method in IDEMPOTENT_METHODS:
        return True
    return any(name.lower() in ("idempotency-key", "x-idempotency-key") for name, _ in headers)


def dropped(transport: asyncio.Transport) -> bool:
    """Whether the engine closed (or wrote on) an idle connection, though the event loop has
    not noticed yet: the socket is readable, as urllib3 checks before reusing one."""
    if transport.is_closing():
        return True
    if transport.get_extra_info("ssl_object") is not None:
        return False  # TLS records (session tickets) may be waiting: readable proves nothing
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
