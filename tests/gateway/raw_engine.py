"""A stand-in engine on raw sockets for the tests of gateway.relay.upstream: it writes exactly the
bytes under test (framings, silences, closes) and records what it got."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from gateway.relay.upstream import Upstream

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Engine:
    """A TCP server answering each connection with `handler`; counts connections and notes
    when one ends (a handler that reads until the client closes ends with it)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.ended = asyncio.Event()  # some connection's handler has finished
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Engine:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self.ended.set()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(head, body) of one request with a content-length."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def answer_and_close(answer: bytes) -> Handler:
    """Read one request, write `answer`, then close the connection."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()

    return handler


def answer_and_hold(answer: bytes = b"") -> Handler:
    """Read one request, write `answer` (maybe nothing), then wait for the client to close."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        while await reader.read(65536):
            pass

    return handler


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def exchange(upstream: Upstream, engine: Engine) -> bytes:
    """One call to the engine: its whole body, the connection given back for reuse."""
    answer = await upstream.request(engine.url, "POST", "/", [], b"{}", 5)
    body = await answer.read(1024)
    answer.release()
    return body


OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def keep_answering(answer: bytes = OK) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer)

    return handler


def close_on_the_second_request(second_answer: bytes = b"") -> Handler:
    """Answer one request kept alive; on the next, write `second_answer` (maybe nothing) and
    close: a kept-alive connection closing just as it is reused."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await read_request(reader)
        writer.write(second_answer)
        await writer.drain()

    return handler


def close_a_while_after_the_second_request(delay: float) -> Handler:
    """Answer one request kept alive; read the next, then close unanswered `delay` s later: an
    engine that read the request (and may have acted on it) before going away."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await read_request(reader)
        await asyncio.sleep(delay)

    return handler
