"""A minimal, fast OpenAI-compatible engine for the gateway benchmarks (raw asyncio).

It answers at once, so what a benchmark measures through the gateway is the gateway's own
cost, not an engine's. Routes:

- ``GET /health`` (and ``/v1/models``);
- ``POST /v1/completions`` and ``/v1/chat/completions``: ``max_tokens`` tokens (default 16).
  Not streamed: one JSON answer with ``usage``. Streamed (``"stream": true``): one SSE event
  per token, ``--event-delay`` seconds apart (the body's ``wharf_event_delay`` overrides it),
  then a usage event when ``stream_options.include_usage`` is set, then ``data: [DONE]``.

Every streamed event carries ``wharf_sent``: ``time.monotonic()`` when it was written, a
system-wide clock, so a client on the same machine can tell how long each event took to
reach it. Each event is written as one chunk, as vLLM does.

Run: ``python benchmarks/upstream.py --port 8100``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from typing import Any

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_MAX_HEAD = 64 * 1024


def _head(status: int, content_type: str, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"content-type: {content_type}\r\n{extra}"
    ).encode()


def json_response(status: int, data: Any, close: bool = False) -> bytes:
    body = json.dumps(data).encode()
    connection = "connection: close\r\n" if close else ""
    head = _head(status, "application/json", f"content-length: {len(body)}\r\n{connection}")
    return head + b"\r\n" + body


def _usage(prompt: Any, tokens: int) -> dict[str, int]:
    prompt_tokens = max(1, len(str(prompt).split()))
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": tokens,
        "total_tokens": prompt_tokens + tokens,
    }


def completion(request: dict[str, Any], chat: bool) -> dict[str, Any]:
    tokens = int(request.get("max_tokens") or 16)
    text = " tok" * tokens
    prompt = request.get("messages") if chat else request.get("prompt")
    if chat:
        choice: dict[str, Any] = {"message": {"role": "assistant", "content": text}}
    else:
        choice = {"text": text, "logprobs": None}
    return {
        "id": "cmpl-bench",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": request.get("model", "tiny"),
        "choices": [{"index": 0, **choice, "finish_reason": "length"}],
        "usage": _usage(prompt, tokens),
    }


def _chunk(request: dict[str, Any], chat: bool, text: str | None, finish: str | None) -> dict:
    if chat:
        choice: dict[str, Any] = {"delta": {"content": text} if text is not None else {}}
    else:
        choice = {"text": text or "", "logprobs": None}
    return {
        "id": "cmpl-bench",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": request.get("model", "tiny"),
        "choices": [{"index": 0, **choice, "finish_reason": finish}],
    }


class EngineProtocol(asyncio.Protocol):
    """One client connection: HTTP/1.1 keep-alive, one request at a time."""

    def __init__(self, event_delay: float) -> None:
        self.event_delay = event_delay
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False  # a streamed answer is being written
        self.streams: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for task in self.streams:
            task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._serve()

    def _serve(self) -> None:
        while self.transport is not None and not self.busy:
            parsed = self._parse()
            if parsed is None:
                return
            method, path, headers, body = parsed
            close = headers.get("connection", "").lower() == "close"
            self._handle(method, path, body, close)
            if close and not self.busy and self.transport is not None:
                self.transport.close()

    def _parse(self) -> tuple[str, str, dict[str, str], bytes] | None:
        """One complete request off the buffer, or None until more bytes arrive."""
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > _MAX_HEAD and self.transport is not None:
                self.transport.close()
            return None
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        method, target, _ = (lines[0].split(" ") + ["", ""])[:3]
        path = target.split("?")[0]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._dechunk(start)
            if body is None:
                return None
            return method, path, headers, body
        length = int(headers.get("content-length", "0") or 0)
        if len(self.buf) < start + length:
            return None
        body = bytes(self.buf[start : start + length])
        del self.buf[: start + length]
        return method, path, headers, body

    def _dechunk(self, pos: int) -> bytes | None:
        body = bytearray()
        while True:
            end = self.buf.find(b"\r\n", pos)
            if end < 0:
                return None
            size = int(bytes(self.buf[pos:end]).split(b";")[0], 16)
            pos = end + 2
            if size == 0:
                tail = self.buf.find(b"\r\n", pos)
                if tail < 0:
                    return None
                del self.buf[: tail + 2]
                return bytes(body)
            if len(self.buf) < pos + size + 2:
                return None
            body += self.buf[pos : pos + size]
            pos += size + 2

    def _handle(self, method: str, path: str, body: bytes, close: bool) -> None:
        assert self.transport is not None
        if path == "/health" or path == "/v1/models":
            data: Any = {"object": "list", "data": [{"id": "tiny", "object": "model"}]}
            self.transport.write(json_response(200, data, close))
            return
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self.transport.write(json_response(404, {"error": f"no route {path}"}, close))
            return
        if method != "POST":
            self.transport.write(json_response(405, {"error": "use POST"}, close))
            return
        try:
            request = json.loads(body)
            assert isinstance(request, dict)
        except (ValueError, AssertionError):
            self.transport.write(json_response(400, {"error": "body must be JSON"}, close))
            return
        chat = path == "/v1/chat/completions"
        if not request.get("stream"):
            self.transport.write(json_response(200, completion(request, chat), close))
            return
        self.busy = True
        task = asyncio.get_running_loop().create_task(self._stream(request, chat, close))
        self.streams.add(task)
        task.add_done_callback(self.streams.discard)

    async def _stream(self, request: dict[str, Any], chat: bool, close: bool) -> None:
        tokens = int(request.get("max_tokens") or 16)
        delay = float(request.get("wharf_event_delay", self.event_delay))
        options = request.get("stream_options") or {}
        extra = "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
        if close:
            extra += "connection: close\r\n"
        self._write(_head(200, "text/event-stream", extra) + b"\r\n", chunk=False)
        for i in range(tokens):
            if i and delay > 0:
                await asyncio.sleep(delay)
            finish = "length" if i == tokens - 1 else None
            self._event(_chunk(request, chat, " tok", finish))
        if options.get("include_usage"):
            usage = _chunk(request, chat, None, None)
            usage["choices"] = []
            usage["usage"] = _usage(request.get("prompt") or request.get("messages"), tokens)
            self._event(usage)
        self._write(b"data: [DONE]\n\n")
        self._write(b"0\r\n\r\n", chunk=False)
        self.busy = False
        if close and self.transport is not None:
            self.transport.close()
        elif self.buf:
            self._serve()

    def _event(self, data: dict[str, Any]) -> None:
        data["wharf_sent"] = time.monotonic()
        self._write(b"data: " + json.dumps(data).encode() + b"\n\n")

    def _write(self, data: bytes, chunk: bool = True) -> None:
        if self.transport is None:
            raise asyncio.CancelledError  # the client went away: stop generating
        if chunk:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self.transport.write(data)


async def serve(host: str, port: int, event_delay: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: EngineProtocol(event_delay), host, port, backlog=4096, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument(
        "--event-delay", type=float, default=0.02, help="seconds between streamed events"
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.event_delay))


if __name__ == "__main__":
    main()
