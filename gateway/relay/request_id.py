"""x-request-id: every request's id, the caller's or a new one, to the engine and back.

A caller's id is kept when it is 1 to 128 visible ASCII characters (it then fits a header and
a log line unchanged); anything else, or none, is replaced by 32 new hex digits. The id goes
to the engine on every upstream request (both legs of a prefill/decode call:
gateway.relay.headers.upstream_request_headers), comes back in the answer's head whoever made the
answer (the engine, or the gateway's own 401, 404, 429, 502, ...), and is on every line
logged while the request is served, the access log's included (contracts.log_format).

Per request this costs about 2 µs (a header scan, 16 random bytes, a contextvar set; the
`send` wrapper adds a quarter of a µs per message sent), against the gateway's ~0.7 ms.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from starlette.types import Message, Scope, Send

from contracts.log_format import REQUEST_ID

HEADER = "x-request-id"
MAX_LENGTH = 128
_HEADER = HEADER.encode()
_ACCEPTED = re.compile(rb"[\x21-\x7e]{1,%d}" % MAX_LENGTH)


def new_id() -> str:
    """A fresh id: 128 random bits as 32 hex digits (a uuid4's worth, without its module)."""
    return os.urandom(16).hex()


def chosen(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The caller's id from raw ASGI headers if it is acceptable, else a new one."""
    for name, value in headers:
        if name == _HEADER:  # ASGI servers give header names in lower case
            return value.decode("ascii") if _ACCEPTED.fullmatch(value) else new_id()
    return new_id()


def current() -> str:
    """The id of the request being served (a new one outside of a request)."""
    return REQUEST_ID.get() or new_id()


class TaggedSend:
    """One request's `send`: the answer's head gets the x-request-id header."""

    __slots__ = ("_send", "_header", "started")

    def __init__(self, send: Send, request_id: str) -> None:
        self._send = send
        self._header = (_HEADER, request_id.encode("ascii"))
        self.started = False  # the answer's head has gone out

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            message["headers"] = [*message.get("headers", ()), self._header]
        await self._send(message)


def tag(scope: Scope, send: Send) -> TaggedSend:
    """Choose the request's id, make it the context's (for logs), and tag its answer."""
    request_id = chosen(scope["headers"])
    REQUEST_ID.set(request_id)
    return TaggedSend(send, request_id)
