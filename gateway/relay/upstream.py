"""The gateway's HTTP/1.1 client for engine instances: lean, because every request uses it.

aiohttp's client spent about 250 µs of CPU on each proxied request (request and response
objects, multidicts, tracing hooks, timeout contexts): a third of the gateway's own cost and
the largest part of the latency it adds. This client does the same exchange in about 60 µs
on asyncio.Protocol and httptools (the C parser uvicorn uses):

- keep-alive pools per origin, last used first; an idle connection is retired after
  `keepalive_s` or as soon as the engine closes it;
- the request (head and body) goes out in one write;
- answers framed by content-length, chunked encoding or the connection's close; the body is
  handed over as it arrives (de-chunked), with back-pressure when the reader falls behind;
- timeouts for connecting and for the engine's silences (before the head and between
  reads), so a stream that keeps producing is never cut, however long it runs;
- cancelling a call, or closing an answer before its end, drops the connection, which is how
  an OpenAI-compatible engine learns to abort the generation.

Errors: ConnectFailedError (the request never left: another instance can take it safely),
UpstreamTimeoutError (the engine was silent too long) and UpstreamBrokenError (the connection failed
or the answer was malformed after the request went out: retrying could run it twice).

One failure is not an error: an engine closing a kept-alive connection just as it is reused
(its idle timer fired while the request was on the way). As Go's net/http, urllib3 and
aiohttp do, a pooled connection is checked before use (one the engine already closed is
passed over: nothing was sent on it), and one that closes with no byte of an answer after
the request went out on it is tried once more, afresh, when the request may be repeated:
its method is idempotent (RFC 9110 9.2.2) or it carries an Idempotency-Key; or the close
came within `reuse.UNREAD_WINDOW_S` of the request, before the engine could have acted on
it (an idle timer firing, not an engine that read a request and then died: it would first
have to run it). The rules are in gateway.relay.reuse.

HEAD answers, and 204 and 304 ones, end with their head: no body is waited for.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import httptools

from contracts import engine_tls
from gateway.relay import reuse


class UpstreamError(Exception):
    """A call to an engine instance failed."""


class ConnectFailedError(UpstreamError):
    """No connection could be made, so the engine never saw the request."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class UpstreamTimeoutError(UpstreamError):
    """The engine sent nothing for the call's timeout."""


class UpstreamBrokenError(UpstreamError):
    """The connection failed or the answer was malformed after the request was sent."""


class AnswerTooLargeError(UpstreamError):
    """An answer read whole was longer than the reader holds."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is longer than {limit} bytes")
        self.limit = limit


# Reading pauses while this much of an answer waits for the gateway to relay it.
_HIGH_WATER = 256 * 1024
# An engine's answer head larger than this is not an answer.
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class _Target:
    """Where an instance URL points: its origin and the path prefix calls go under."""

    scheme: str
    host: str
    port: int
    host_header: bytes
    base_path: str


@lru_cache(maxsize=1024)
def _target(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailedError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return _Target(
        parts.scheme,
        parts.hostname,
        port,
        parts.netloc.rpartition("@")[2].encode("idna"),
        parts.path.rstrip("/"),
    )


class _Connection(asyncio.Protocol):
    """One connection to an engine and the answer in progress on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.lost: UpstreamError | None = None
        self.pooled: tuple[list[_Connection], asyncio.TimerHandle] | None = None
        # One parser reads one answer after another; it is replaced after a bodiless one.
        self.parser = httptools.HttpResponseParser(self)
        self.bodiless = False  # the request was a HEAD: its answer ends with its head
        self.spent = False  # the parser still waits for a body that will never come
        self.sent_at = 0.0
        self.closed_at = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_size = 0
        self.framed = False  # the answer says its length (content-length or chunked)
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.heard = False  # some byte of this exchange's answer arrived
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timeout = 0.0
        self.last_heard = 0.0

    # -- one exchange ----------------------------------------------------------------------

    def send(self, data: bytes, timeout: float, bodiless: bool = False) -> None:
        assert self.transport is not None
        self._reset()
        self.bodiless = bodiless
        self.timeout = timeout
        self.sent_at = self.last_heard = self.loop.time()
        self.timer = self.loop.call_at(self.last_heard + timeout, self._check_silence)
        self.transport.write(data)

    async def wait(self) -> None:
        """Until something new arrives: head, body, the end, or a failure (then raised).

        What arrived before a failure is still handed over: callers look for it first.
        """
        if self.lost is not None:
            raise self.lost
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self) -> bytes:
        """The body received so far, handed over at once."""
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        if self.buffered > _HIGH_WATER and self.transport is not None:
            self.transport.resume_reading()
        self.buffered = 0
        return data

    def done(self) -> None:
        """The exchange is over (read or given up): no more timer."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def abort(self) -> None:
        self.done()
        self.lost = self.lost or UpstreamBrokenError("connection closed by the gateway")
        if self.transport is not None:
            self.transport.abort()

    def _check_silence(self) -> None:
        quiet_until = self.last_heard + self.timeout
        if self.loop.time() < quiet_until:
            self.timer = self.loop.call_at(quiet_until, self._check_silence)
            return
        self.timer = None
        self._fail(UpstreamTimeoutError(f"the engine sent nothing for {self.timeout:g} s"))
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: UpstreamError) -> None:
        self.lost = self.lost or exc
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio and uvloop both open TCP connections with TCP_NODELAY set.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.pooled is not None:
            self.abort()  # an idle connection has nothing to say
            return
        self.last_heard = self.loop.time()
        self.heard = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamBrokenError(f"malformed answer: {exc}"))
            self.abort()
        if self.spent:
            self.parser = httptools.HttpResponseParser(self)
            self.spent = False

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed_at = self.loop.time()
        self.done()
        if self.pooled is not None:
            idle, timer = self.pooled
            timer.cancel()
            if self in idle:
                idle.remove(self)
            self.pooled = None
        if self.status and not self.complete and not self.framed and self.lost is None:
            self.complete = True  # an answer framed by the connection's close ends here
            self._wake()
            return
        self._fail(UpstreamBrokenError(f"connection lost: {exc or 'closed by the engine'}"))

    # -- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            raise httptools.HttpParserError("the engine sent more than its answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value)
        if self.head_size > _MAX_HEAD:
            raise httptools.HttpParserError("answer head too large")
        lowered = name.lower()
        if lowered == b"content-length" or lowered == b"transfer-encoding":
            self.framed = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:
            # An interim answer (100 Continue, 103 Early Hints): the real one follows.
            self.headers, self.head_size, self.framed = [], 0, False
            return
        self.status = status
        if status in (204, 304):
            self.framed = True
        if self.bodiless:
            # A HEAD's answer announces a body it never sends; the parser cannot be told (it
            # does not know the request), so the answer ends here and it is replaced.
            self.framed = self.complete = self.spent = True
            self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            self.keep_alive = False  # bytes after a bodiless answer: not reusable
            return
        if body:
            self.chunks.append(body)
            self.buffered += len(body)
            if self.buffered > _HIGH_WATER and self.transport is not None:
                self.transport.pause_reading()
            self._wake()

    def on_message_complete(self) -> None:
        if not self.status or self.complete:
            return  # the end of an interim answer, or of a body a HEAD's answer has not
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()


class Answer:
    """An engine's answer: status and head at once, the body as it arrives."""

    def __init__(self, pool: Upstream, target: _Target, connection: _Connection) -> None:
        self._pool = pool
        self._target = target
        self._connection = connection
        self.status = connection.status
        self.headers = connection.headers  # as sent: (name, value) bytes

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (`name` in lower case)."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    @property
    def at_eof(self) -> bool:
        """Nothing more to read: the whole body has been handed over."""
        return self._connection.complete and not self._connection.chunks

    async def read_chunk(self) -> bytes:
        """What arrived since the last read, waiting for some; b"" once the body is over."""
        connection = self._connection
        while not connection.chunks:
            if connection.complete:
                return b""
            await connection.wait()
        return connection.take()

    async def peek(self, limit: int) -> bytes:
        """The body's first `limit` bytes (fewer if it is shorter), left to be read again."""
        connection = self._connection
        try:
            while connection.buffered < limit and not connection.complete:
                await connection.wait()
        except UpstreamError:
            pass  # the reads that follow raise it
        return b"".join(connection.chunks)[:limit]

    async def read(self, limit: int) -> bytes:
        """The whole body; AnswerTooLargeError as soon as it is known to pass `limit` bytes."""
        parts, size = [], 0
        while chunk := await self.read_chunk():
            size += len(chunk)
            if size > limit:
                raise AnswerTooLargeError(limit)
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool if it can be reused."""
        connection = self._connection
        connection.done()
        if self.at_eof and connection.keep_alive and connection.lost is None:
            self._pool._put(self._target, connection)
        else:
            connection.abort()

    def close(self) -> None:
        """Drop the connection, whatever is left of the answer (the engine sees it close)."""
        self._connection.abort()


class Upstream:
    """The process's connections to engine instances.

    No cap on connections: engines queue requests themselves, and a cap here would turn
    long streams into waits for everyone behind them. Connecting on a cluster network is
    quick or not happening, hence a short connect timeout (a refused or timed-out connect
    lets the request move to another instance). Engines behind uvicorn (vLLM, SGLang) close
    idle connections after 5 s, and reusing one at that moment fails the request, so idle
    connections are retired a little earlier.
    """

    def __init__(self, *, connect_timeout: float = 10.0, keepalive_s: float = 4.0) -> None:
        self._connect_timeout = connect_timeout
        self._keepalive_s = keepalive_s
        self._idle: dict[_Target, list[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        # Connections opened; and kept-alive connections the engine closed as they were
        # reused: found closed before use, and requests sent once more after one closed
        # unanswered.
        self.connects = 0
        self.passed_over = 0
        self.resent = 0

    async def request(
        self,
        url: str,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
        timeout: float,
    ) -> Answer:
        """Send a request to the instance at `url` and wait for its answer's head.

        `target` is the path and query, appended to the URL's own path; `headers` go out as
        given, plus host and content-length; `timeout` bounds connecting and each silence.
        """
        where = _target(url)
        lines = [b"%s %s%s HTTP/1.1\r\nhost: %s\r\n" % (
            method.encode(), where.base_path.encode(), target.encode("latin-1"), where.host_header
        )]  # fmt: skip
        for name, value in headers:
            lines.append(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")))
        if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            lines.append(b"content-length: %d\r\n" % len(body))
        lines.append(b"\r\n")
        lines.append(body)
        request = b"".join(lines)
        connect_timeout = min(self._connect_timeout, timeout)
        connection, reused = await self._connection(where, connect_timeout)
        while True:
            try:
                connection.send(request, timeout, bodiless=method == "HEAD")
                while not connection.status:
                    await connection.wait()
                return Answer(self, where, connection)
            except UpstreamBrokenError:
                connection.abort()
                if not reused or not reuse.may_resend(
                    reuse.replayable(method, headers),
                    connection.heard,
                    connection.sent_at,
                    connection.closed_at,
                ):
                    raise
            except BaseException:
                connection.abort()
                raise
            # A kept-alive connection the engine closed as it was reused: once more, afresh.
            self.resent += 1
            connection, reused = await self._connect(where, connect_timeout), False

    async def close(self) -> None:
        for idle in list(self._idle.values()):
            for connection in list(idle):
                connection.abort()
        self._idle.clear()

    async def _connection(self, where: _Target, connect_timeout: float) -> tuple[_Connection, bool]:
        """A connection to `where` and whether it was kept alive from an earlier call."""
        idle = self._idle.get(where)
        while idle:
            connection = idle.pop()
            assert connection.pooled is not None
            connection.pooled[1].cancel()
            connection.pooled = None
            transport = connection.transport
            if connection.lost is None and transport is not None and not reuse.dropped(transport):
                return connection, True
            self.passed_over += 1
            connection.abort()
        return await self._connect(where, connect_timeout), False

    async def _connect(self, where: _Target, connect_timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        context = None
        if where.scheme == "https":
            # A node's engine fronts with TLS: verified against WHARF_ENGINE_TLS_CA.
            context = self._ssl = self._ssl or engine_tls.client_context()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop), where.host, where.port, ssl=context
                ),
                connect_timeout,
            )
        except TimeoutError as exc:
            raise ConnectFailedError(
                f"no connection to {where.host}:{where.port} within {connect_timeout:g} s",
                timed_out=True,
            ) from exc
        except OSError as exc:
            raise ConnectFailedError(f"cannot connect to {where.host}:{where.port}: {exc}") from exc
        self.connects += 1
        return connection

    def _put(self, where: _Target, connection: _Connection) -> None:
        if self._keepalive_s <= 0:
            connection.abort()  # keep-alive off: one request per connection
            return
        idle = self._idle.setdefault(where, [])
        timer = asyncio.get_running_loop().call_later(self._keepalive_s, connection.abort)
        connection.pooled = (idle, timer)
        idle.append(connection)
