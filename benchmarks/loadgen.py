"""An open-loop HTTP/1.1 load generator on raw asyncio, with per-request timings.

Open loop: request i is *scheduled* at ``t0 + i / rate`` and sent then, whether or not
earlier requests have finished, and its latency is measured from that scheduled time. A
closed-loop client (N workers, each waiting for its answer before sending the next) slows
down with the server and so hides queueing; this one does not (no coordinated omission): if
the generator itself falls behind, the lag counts against the latency, and ``send_lag`` says
how much of it was ours.

The client is written on asyncio protocols (no aiohttp/httpx) so that its own cost per
request stays small next to what it measures. Streamed answers are decoded (chunked framing,
then SSE events) as bytes arrive, and every event is stamped with its arrival time
(``time.monotonic``, the same system-wide clock as the upstream's stamps).

Run alone: ``python benchmarks/loadgen.py --url http://127.0.0.1:8000/v1/completions --rate 200``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# ---------------------------------------------------------------------------------------------
# Statistics


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of values, interpolating linearly; nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class Result:
    """One request: when it was due, sent and finished (monotonic seconds), and how it ended."""

    scheduled: float
    sent: float = math.nan
    done: float = math.nan
    status: int = 0  # 0: no HTTP answer (see error)
    error: str | None = None
    body: bytes = b""
    # For streamed answers: (arrival time, raw event text) per SSE event, in order.
    events: list[tuple[float, bytes]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    @property
    def latency(self) -> float:
        return self.done - self.scheduled


@dataclass
class Summary:
    count: int
    ok: int
    outcomes: dict[str, int]  # "200", "429", "ConnectionError", ...
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    achieved_rps: float
    send_lag_p99_ms: float

    @property
    def error_rate(self) -> float:
        return 1.0 - self.ok / self.count if self.count else 0.0

    def line(self) -> str:
        outcomes = " ".join(f"{k}:{v}" for k, v in sorted(self.outcomes.items()))
        return (
            f"n={self.count} ok={self.ok} p50={self.p50_ms:.2f}ms p90={self.p90_ms:.2f}ms "
            f"p99={self.p99_ms:.2f}ms max={self.max_ms:.2f}ms rps={self.achieved_rps:.0f} "
            f"lag_p99={self.send_lag_p99_ms:.2f}ms [{outcomes}]"
        )


def outcome(result: Result) -> str:
    return result.error if result.error else str(result.status)


def summarize(results: Sequence[Result], duration: float | None = None) -> Summary:
    """Latency percentiles over the successful requests, plus how the others ended.

    Throughput is successes per second over `duration` when given (results gathered in
    several runs), else over the span from the first scheduled start to the last answer.
    """
    ok = [r for r in results if r.ok]
    latencies = [r.latency * 1000 for r in ok]
    lags = [(r.sent - r.scheduled) * 1000 for r in results if not math.isnan(r.sent)]
    span = duration or 0.0
    if ok and duration is None:
        span = max(r.done for r in ok) - min(r.scheduled for r in results)
    return Summary(
        count=len(results),
        ok=len(ok),
        outcomes=dict(Counter(outcome(r) for r in results)),
        p50_ms=percentile(latencies, 50),
        p90_ms=percentile(latencies, 90),
        p99_ms=percentile(latencies, 99),
        max_ms=max(latencies, default=math.nan),
        achieved_rps=len(ok) / span if span > 0 else 0.0,
        send_lag_p99_ms=percentile(lags, 99),
    )


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 client


class _Response:
    """An incremental parser for one HTTP/1.1 response (Content-Length, chunked, or to close)."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.state = "head"
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.remaining = 0  # body bytes left (content-length) or in the current chunk
        self.body = bytearray()
        self.events: list[tuple[float, bytes]] = []
        self._sse = bytearray()

    def feed(self, data: bytes, now: float) -> bool:
        """Consume data that arrived at `now`; True once the response is complete."""
        self.buf += data
        while True:
            if self.state == "head":
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return False
                self._head(bytes(self.buf[:end]))
                del self.buf[: end + 4]
            elif self.state == "length":
                take = min(self.remaining, len(self.buf))
                self._body(bytes(self.buf[:take]), now)
                del self.buf[:take]
                self.remaining -= take
                if self.remaining == 0:
                    self.state = "done"
                else:
                    return False
            elif self.state == "chunk-size":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return False
                self.remaining = int(bytes(self.buf[:end]).split(b";")[0], 16)
                del self.buf[: end + 2]
                self.state = "chunk" if self.remaining else "trailers"
            elif self.state == "chunk":
                if len(self.buf) < self.remaining + 2:
                    # Hand over what is here now, so events are stamped when they arrive.
                    if self.stream and len(self.buf) > 0:
                        take = min(self.remaining, len(self.buf))
                        self._body(bytes(self.buf[:take]), now)
                        del self.buf[:take]
                        self.remaining -= take
                    return False
                self._body(bytes(self.buf[: self.remaining]), now)
                del self.buf[: self.remaining + 2]
                self.state = "chunk-size"
            elif self.state == "trailers":
                if self.buf.startswith(b"\r\n"):
                    self.state = "done"
                else:
                    end = self.buf.find(b"\r\n\r\n")
                    if end < 0:
                        return False
                    self.state = "done"
            elif self.state == "until-close":
                self._body(bytes(self.buf), now)
                self.buf.clear()
                return False
            if self.state == "done":
                return True

    def close(self, now: float) -> bool:
        """The connection closed; True if that legitimately ends this response."""
        return self.state == "until-close"

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        self.status = int(rest[:3])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        connection = self.headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection and version == "HTTP/1.1"
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.state = "chunk-size"
        elif "content-length" in self.headers:
            self.remaining = int(self.headers["content-length"])
            self.state = "length" if self.remaining else "done"
        elif self.status in (204, 304) or 100 <= self.status < 200:
            self.state = "done"
        else:
            self.state = "until-close"
            self.keep_alive = False

    def _body(self, data: bytes, now: float) -> None:
        if not data:
            return
        if not self.stream:
            self.body += data
            return
        self._sse += data.replace(b"\r\n", b"\n")
        while (end := self._sse.find(b"\n\n")) >= 0:
            self.events.append((now, bytes(self._sse[:end])))
            del self._sse[: end + 2]


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: _Response | None = None
        self.waiter: asyncio.Future[_Response] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if self.response is None or self.waiter is None:
            self.closed = True  # bytes nobody asked for: the connection is out of step
            if self.transport is not None:
                self.transport.abort()
            return
        try:
            complete = self.response.feed(data, now)
        except (ValueError, IndexError) as exc:
            self._finish(exc)
            return
        if complete:
            self._finish(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None and self.waiter is not None:
            if self.response.close(time.monotonic()):
                self._finish(None)
            else:
                self._finish(ConnectionError("connection closed mid-response"))

    def _finish(self, exc: BaseException | None) -> None:
        waiter, response = self.waiter, self.response
        self.waiter = self.response = None
        if waiter is None or waiter.done() or response is None:
            return
        if exc is None:
            waiter.set_result(response)
        else:
            waiter.set_exception(exc)

    def send(self, raw: bytes, response: _Response) -> asyncio.Future[_Response]:
        assert self.transport is not None
        self.response = response
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return self.waiter

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """Keep-alive connections to one host:port, opened on demand up to `max_connections`."""

    def __init__(self, url: str, max_connections: int = 1024) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.max_connections = max_connections
        self._idle: list[_Connection] = []
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def _acquire(self) -> _Connection:
        while True:
            while self._idle:
                conn = self._idle.pop()  # LIFO: the warmest connection
                if not conn.closed:
                    return conn
                self._open -= 1
            if self._open < self.max_connections:
                self._open += 1
                try:
                    _, conn = await asyncio.get_running_loop().create_connection(
                        _Connection, self.host, self.port
                    )
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
                return conn
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and not conn.closed:
            self._idle.append(conn)
        else:
            conn.abort()
            self._open -= 1
        self._wake()

    async def request(self, raw: bytes, stream: bool, result: Result) -> None:
        """Send one raw request and fill in `result` (status, body or events, done)."""
        conn = await self._acquire()
        reusable = False
        try:
            result.sent = time.monotonic()
            response = await conn.send(raw, _Response(stream))
            reusable = response.keep_alive
        finally:
            self._release(conn, reusable)
        result.done = time.monotonic()
        result.status = response.status
        result.body = bytes(response.body)
        result.events = response.events

    def close(self) -> None:
        for conn in self._idle:
            conn.abort()
        self._idle.clear()


def build_request(
    url: str, body: bytes | None, headers: dict[str, str] | None = None, method: str = "POST"
) -> bytes:
    """The raw bytes of one HTTP/1.1 request (keep-alive; JSON body when given)."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


# ---------------------------------------------------------------------------------------------
# Open-loop scheduling


async def open_loop(
    targets: Sequence[Pool],
    make_request: Callable[[int], bytes],
    *,
    rate: float,
    duration: float,
    timeout: float = 10.0,
    stream: bool = False,
    start_at: float | None = None,
) -> list[Result]:
    """Send round(rate * duration) requests at a fixed rate, round robin over `targets`.

    Request i is due at start + i / rate. Each gets at most `timeout` seconds; whatever is
    still running `timeout` seconds after the last was due is cancelled and recorded as
    "timeout", so a run never lasts longer than duration + timeout.
    """
    count = max(1, round(rate * duration))
    start = start_at if start_at is not None else time.monotonic() + 0.05
    results = [Result(scheduled=start + i / rate) for i in range(count)]
    raws = [make_request(i) for i in range(count)]  # built up front: no cost on the clock

    async def one(i: int) -> None:
        result = results[i]
        try:
            async with asyncio.timeout(timeout):
                await targets[i % len(targets)].request(raws[i], stream, result)
        except TimeoutError:
            result.error = "timeout"
        except OSError as exc:
            result.error = type(exc).__name__
        except (ValueError, IndexError) as exc:
            result.error = f"bad-response:{type(exc).__name__}"
        if result.error:
            result.done = time.monotonic()

    tasks: list[asyncio.Task[None]] = []
    i = 0
    while i < count:
        now = time.monotonic()
        while i < count and results[i].scheduled <= now:
            tasks.append(asyncio.create_task(one(i)))
            i += 1
        if i < count:
            await asyncio.sleep(max(0.0, results[i].scheduled - time.monotonic()))
    _, pending = await asyncio.wait(tasks, timeout=timeout + 1.0) if tasks else ((), ())
    for task in pending:
        task.cancel()
    for result in results:
        if math.isnan(result.done):
            result.error = result.error or "timeout"
            result.done = time.monotonic()
    return results


# ---------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="e.g. http://127.0.0.1:8000/v1/completions")
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds (max 120)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    parser.add_argument("--token", help="sent as Authorization: Bearer <token>")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 120 or args.rate <= 0:
        parser.error("--duration must be in (0, 120] and --rate positive")
    payload: dict[str, object] = {
        "model": args.model,
        "prompt": "hello world",
        "max_tokens": args.max_tokens,
    }
    if args.stream:
        payload["stream"] = True
    raw = build_request(
        args.url,
        json.dumps(payload).encode(),
        {"Authorization": f"Bearer {args.token}"} if args.token else None,
    )

    async def run() -> list[Result]:
        pool = Pool(args.url)
        try:
            return await open_loop(
                [pool],
                lambda i: raw,
                rate=args.rate,
                duration=args.duration,
                timeout=args.timeout,
                stream=args.stream,
            )
        finally:
            pool.close()

    print(summarize(asyncio.run(run())).line())


if __name__ == "__main__":
    main()
