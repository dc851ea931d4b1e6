"""A lean Redis connection for the limiter's per-request script calls.

redis-py's asyncio client spends about 130 µs of CPU on every command (pool checkout,
locks, timeout contexts), more than the rest of a proxied request's own work; the
limiter calls Redis on every request, so its calls go through this instead: one
connection per process; while replies are outstanding, the commands of concurrent requests
are written together once per event loop turn (auto-pipelining); hiredis packs the commands
and parses the replies (in C), which are handed out in order. Scripts are still registered
with redis-py (`register_script`), which also loads them when Redis says NOSCRIPT;
everything else (snapshot, usage, health) keeps using redis-py.

Failures surface as redis-py's exceptions: ConnectionError when Redis cannot be reached or
the connection breaks (every pending call fails with it), TimeoutError when a reply is late
(the connection is then dropped, since later replies could no longer be matched to their
calls), ResponseError for an error reply.

A rediss:// URL's TLS options (`?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.pem`, client
certificates, hostname checking) apply here as they do to redis-py's connections.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any, cast

import hiredis
from redis.asyncio.connection import RedisSSLContext, parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Arg = bytes | str | int


def pack(args: tuple[Arg, ...]) -> bytes:
    """One command in RESP, Redis's wire format, packed by hiredis (in C)."""
    # hiredis's stub types the argument as a one-element tuple; it takes any length.
    return hiredis.pack_command(cast(Any, args))


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.outgoing: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.lost: BaseException | None = None

    def send(self, command: bytes, waiter: asyncio.Future[Any]) -> None:
        idle = not self.waiting and not self.outgoing
        self.waiting.append(waiter)
        if idle and self.transport is not None and self.lost is None:
            # Nothing outstanding: no one to share a write with, so no reason to wait.
            self.transport.write(command)
            return
        if not self.outgoing:
            # Busy: commands issued during this loop turn go out together, in one write.
            asyncio.get_running_loop().call_soon(self.flush)
        self.outgoing.append(command)

    def flush(self) -> None:
        data, self.outgoing = b"".join(self.outgoing), []
        if self.transport is not None and self.lost is None:
            self.transport.write(data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, so no isinstance check.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"connection to Redis lost: {exc or 'closed'}"))

    def fail(self, exc: BaseException) -> None:
        self.lost = self.lost or exc
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(exc)


class PipelinedRedis:
    def __init__(self, url: str, timeout: float) -> None:
        self._options: dict[str, Any] = dict(parse_url(url))
        self._tls = tls_context(self._options) if url.startswith("rediss://") else None
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    async def call(self, *args: Arg) -> Any:
        """Send one command and return its reply (an error reply is raised)."""
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            protocol = await self._connect()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        protocol.send(pack(args), waiter)
        timer = loop.call_later(self._timeout, self._expire, protocol, waiter)
        try:
            reply = await waiter
        finally:
            timer.cancel()
        if isinstance(reply, ResponseError):
            raise NoScriptError(str(reply)) if str(reply).startswith("NOSCRIPT") else reply
        return reply

    async def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None

    def _expire(self, protocol: _Protocol, waiter: asyncio.Future[Any]) -> None:
        if waiter.done():
            return
        timeout = RedisTimeoutError(f"Redis did not answer within {self._timeout:g} s")
        protocol.fail(timeout)
        if protocol.transport is not None:
            protocol.transport.abort()

    async def _connect(self) -> _Protocol:
        """The live connection, opened (once, however many callers wait) if need be."""
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._open())
        try:
            protocol = await asyncio.shield(self._connecting)
        except (TimeoutError, OSError) as exc:
            raise RedisConnectionError(f"cannot connect to Redis: {exc}") from exc
        self._protocol = protocol
        return protocol

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        options = self._options
        path = options.get("path")
        if path:
            connect = loop.create_unix_connection(_Protocol, path)
        else:
            host, port = options.get("host", "localhost"), options.get("port", 6379)
            connect = loop.create_connection(_Protocol, host, port, ssl=self._tls)
        transport, protocol = await asyncio.wait_for(connect, self._timeout)
        try:
            await self._prepare(protocol)
        except BaseException:
            transport.close()
            raise
        return protocol

    async def _prepare(self, protocol: _Protocol) -> None:
        """Authenticate and select the database, as the URL says."""
        setup: list[tuple[Arg, ...]] = []
        password, username = self._options.get("password"), self._options.get("username")
        if password:
            setup.append(("AUTH", username, password) if username else ("AUTH", password))
        if self._options.get("db"):
            setup.append(("SELECT", self._options["db"]))
        loop = asyncio.get_running_loop()
        for command in setup:
            waiter: asyncio.Future[Any] = loop.create_future()
            protocol.send(pack(command), waiter)
            reply = await asyncio.wait_for(waiter, self._timeout)
            if isinstance(reply, ResponseError):
                raise RedisConnectionError(f"Redis refused {command[0]!r}: {reply}")


def tls_context(options: dict[str, Any]) -> ssl.SSLContext:
    """The TLS settings a rediss:// URL gives (ssl_cert_reqs, ssl_ca_certs, ssl_certfile,
    ssl_keyfile, ssl_check_hostname...), read as redis-py's own connections read them, so that
    this connection and the gateway's redis-py clients agree."""
    cert_reqs = options.get("ssl_cert_reqs", "required")
    return RedisSSLContext(
        keyfile=options.get("ssl_keyfile"),
        certfile=options.get("ssl_certfile"),
        cert_reqs=cert_reqs,
        include_verify_flags=options.get("ssl_include_verify_flags"),
        exclude_verify_flags=options.get("ssl_exclude_verify_flags"),
        ca_certs=options.get("ssl_ca_certs"),
        ca_data=options.get("ssl_ca_data"),
        ca_path=options.get("ssl_ca_path"),
        check_hostname=options.get("ssl_check_hostname", cert_reqs != "none"),
        min_version=options.get("ssl_min_version"),
        ciphers=options.get("ssl_ciphers"),
        password=options.get("ssl_password"),
    ).get()
