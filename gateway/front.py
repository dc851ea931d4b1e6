"""An engine's front: the one door to an engine on a node, which lets in only callers with
the instance's engine key (contracts.engine_keys) — Wharf's gateways and its worker.

Engines differ: vLLM checks a key on its /v1 routes only, TGI, BladeLLM, PaddleNLP and a
custom command check none. So each engine Wharf starts on Docker or as a local process sits
behind a front: the engine listens where only its front (and its own service's instances)
reach it, and the front listens where the gateways call. A connection's first request must
carry `Authorization: Bearer <engine key>`; from then on the connection is the key holder's
and its bytes are relayed both ways untouched (streams, WebSockets, keep-alive), so a
connection is authenticated, not each request. Without the key: 401, and the connection is
closed before a byte reaches the engine.

Three more doors, all narrow:
- `GET /.wharf/ready` (with the key) answers 200 when the engine accepts connections, 503
  when not: the worker's port check of an engine without a health path.
- `GET /.wharf/probe?port=P[&path=/x]&timeout=S` (with the key): the worker's probe of a
  port of the instance that its spec's container probes name (EAS's http_get, tcp_socket).
  Only the ports given with `--probe-port P=Q` (the spec's port P is Q on the loopback the
  front shares with its engine: a container's own network namespace, or the engine's port
  of a local process); 200 when Q accepts a connection (no path) or answers GET /x with a
  2xx or 3xx within S seconds, else 503; 403 for any other port.
- `GET <metrics path>` with the operator's metrics token (WHARF_ENGINE_METRICS_TOKEN), for
  Prometheus: that one request is relayed with `Connection: close`, nothing after it.

It runs in the Wharf image beside a container, or as the parent of a local engine process
(`-- command...`, started in `--cwd`), whose exit code it then exits with.

    python -m gateway.front --listen 0.0.0.0:18999 --upstream 127.0.0.1:8000 \
        [--metrics-path /metrics] [--probe-port 8000=8000 ...] [--cwd DIR] \
        [-- engine command ...]

The key comes in WHARF_FRONT_KEY (and the metrics token in WHARF_FRONT_METRICS_TOKEN),
never on the command line; an engine it starts gets neither. With WHARF_ENGINE_TLS_CERT and
WHARF_ENGINE_TLS_KEY (the node's certificate and key, contracts.engine_tls) it serves TLS
only, the files read again at the first handshake after they change.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import os
import re
import signal
import sys
from urllib.parse import parse_qs, urlsplit

from contracts import engine_tls
from contracts.engine_front import KEY_ENV, METRICS_TOKEN_ENV, PROBE_PATH, READY_PATH
from contracts.serving_tls import ReloadingCertificate, ServingTls, TlsConfigError

MAX_HEAD = 64 * 1024  # bytes of a request's line and headers
HEAD_TIMEOUT = 30.0  # seconds a caller has to send them
CHUNK = 64 * 1024
# A probe's path, as the spec allows it (contracts.spec_probes): nothing to smuggle a header.
PROBE_TARGET = re.compile(r"^/[A-Za-z0-9._~/-]{0,255}$")
MAX_PROBE_TIMEOUT = 300.0
PROBE_HEAD = 8192  # bytes of a probed port's status line read


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def read_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """A request head's method, path and headers (lower-case names, the first of each)."""
    lines = head.decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    path = rest.rpartition(" ")[0] or rest
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers.setdefault(name.strip().lower(), value.strip())
    return method, path.split("?", 1)[0], headers


def probe_query(head: bytes) -> tuple[int, str | None, float] | None:
    """(port, path or None for a connect, timeout) of a /.wharf/probe request; None when the
    query is not one."""
    target = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    query = parse_qs(urlsplit(target[1] if len(target) > 1 else "").query)
    try:
        port = int(query["port"][0])
        timeout = min(max(float(query.get("timeout", ["1"])[0]), 0.1), MAX_PROBE_TIMEOUT)
    except (KeyError, ValueError):
        return None
    path = query.get("path", [None])[0]
    if path is not None and (not PROBE_TARGET.fullmatch(path) or ".." in path):
        return None
    return port, path, timeout


def _bearer(headers: dict[str, str], secret: str) -> bool:
    given = headers.get("authorization", "").encode()
    return bool(secret) and hmac.compare_digest(given, f"Bearer {secret}".encode())


def _answer(status: str, message: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "engine_front"}}).encode()
    head = (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


def _closing(head: bytes) -> bytes:
    """The head, asking the engine to close the connection after its answer."""
    lines = [line for line in head[:-4].split(b"\r\n") if not line.lower().startswith(
        b"connection:")]  # fmt: skip
    return b"\r\n".join([*lines, b"connection: close"]) + b"\r\n\r\n"


class Front:
    def __init__(
        self, upstream: tuple[str, int], key: str, metrics_path: str = "", metrics_token: str = "",
        probe_ports: dict[int, int] | None = None,
    ):  # fmt: skip
        self.upstream, self.key = upstream, key
        self.metrics_path, self.metrics_token = metrics_path, metrics_token
        self.probe_ports = probe_ports or {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            writer.write(_answer("431 Request Header Fields Too Large", "request head too large"))
            return
        except (TimeoutError, asyncio.IncompleteReadError):
            return
        method, path, headers = read_head(head)
        only_this = False
        if not _bearer(headers, self.key):
            if not (method == "GET" and path == self.metrics_path and self.metrics_path
                    and _bearer(headers, self.metrics_token)):  # fmt: skip
                writer.write(_answer("401 Unauthorized", "this engine is reached through "
                                     "Wharf's gateway; its engine key is required"))  # fmt: skip
                return
            only_this, head = True, _closing(head)
        if path == READY_PATH and not only_this:
            if await self._accepts():
                writer.write(_answer("200 OK", "the engine accepts connections"))
            else:
                writer.write(_answer("503 Service Unavailable", "not accepting connections"))
            return
        if path == PROBE_PATH and not only_this:
            writer.write(await self._probe(head))
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.write(_answer("502 Bad Gateway", "the engine is not accepting connections"))
            return
        try:
            up_writer.write(head)
            await self._relay(reader, writer, up_reader, up_writer, only_this)
        finally:
            up_writer.close()

    async def _accepts(self) -> bool:
        try:
            _, probe = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 2)
        except (OSError, TimeoutError):
            return False
        probe.close()
        return True

    async def _probe(self, head: bytes) -> bytes:
        """The answer to a /.wharf/probe request (the module's docstring)."""
        query = probe_query(head)
        if query is None:
            return _answer("400 Bad Request", "give port=N, and path=/x for an HTTP probe")
        port, path, timeout = query
        if port not in self.probe_ports:
            return _answer("403 Forbidden", f"port {port} is not one this instance's probes name")
        reached = _probe_port(self.upstream[0], self.probe_ports[port], path)
        try:
            passed = await asyncio.wait_for(reached, timeout)
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError):  # fmt: skip
            passed = False
        if passed:
            return _answer("200 OK", f"port {port} passed")
        return _answer("503 Service Unavailable", f"port {port} failed its probe")

    @staticmethod
    async def _relay(reader, writer, up_reader, up_writer, only_this: bool) -> None:
        """Both ways until the engine's side ends; the caller's end is passed on as a
        half-close. With `only_this`, nothing more of the caller's reaches the engine."""

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while chunk := await source.read(CHUNK):
                sink.write(chunk)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()

        down = asyncio.ensure_future(pipe(up_reader, writer))
        up = None if only_this else asyncio.ensure_future(pipe(reader, up_writer))
        try:
            await down
        finally:
            if up is not None:
                up.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await up


async def _probe_port(host: str, port: int, path: str | None) -> bool:
    """Whether `port` accepts a connection (no `path`) or answers GET `path` with 2xx/3xx."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        if path is None:
            return True
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: wharf-probe"
                     "\r\nConnection: close\r\n\r\n".encode())  # fmt: skip
        await writer.drain()
        status = (await reader.readuntil(b"\r\n"))[:PROBE_HEAD].split()
        return len(status) >= 2 and status[1].isdigit() and 200 <= int(status[1]) < 400
    finally:
        writer.close()


def probe_ports(given: list[str]) -> dict[int, int]:
    """`--probe-port P=Q` arguments as {P: Q}."""
    ports = {}
    for text in given:
        asked, _, reached = text.partition("=")
        ports[int(asked)] = int(reached or asked)
    return ports


async def serve(
    args: argparse.Namespace, key: str, metrics_token: str, tls: ServingTls | None = None
) -> int:
    front = Front(_address(args.upstream), key, args.metrics_path, metrics_token,
                  probe_ports(args.probe_port))  # fmt: skip
    host, port = _address(args.listen)
    context = ReloadingCertificate(tls.cert, tls.key).context if tls else None
    server = await asyncio.start_server(front.handle, host, port, limit=MAX_HEAD, ssl=context)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    over = "TLS" if tls else "plain HTTP"
    print(f"front: {args.listen} ({over}) -> {args.upstream}, engine key required",
          file=sys.stderr)  # fmt: skip
    child = None
    if args.command:
        kept = (KEY_ENV, METRICS_TOKEN_ENV, engine_tls.CERT_ENV, engine_tls.KEY_ENV)
        env = {k: v for k, v in os.environ.items() if k not in kept}
        # Its own process group is the front's (the runtime signals the whole group).
        child = await asyncio.create_subprocess_exec(*args.command, env=env, cwd=args.cwd)
        ended = asyncio.ensure_future(child.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
        server.close()
        code = await ended
        stopped.cancel()
        return code if code >= 0 else 128 - code
    await stop.wait()
    server.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.front", description=__doc__)
    parser.add_argument("--listen", required=True, help="host:port the gateways call")
    parser.add_argument("--upstream", required=True, help="host:port of the engine")
    parser.add_argument("--metrics-path", default="", help="the engine's metrics page")
    parser.add_argument(
        "--probe-port",
        action="append",
        default=[],
        metavar="P=Q",
        help="a port the spec's probes name (P), reached at Q beside the engine",
    )
    parser.add_argument("--cwd", default=None, help="where the engine it starts runs")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- an engine to start")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    key = os.environ.get(KEY_ENV, "")
    if not key:
        parser.error(f"{KEY_ENV} is not set: the front lets no one in without a key")
    try:
        tls = engine_tls.node_tls()
    except TlsConfigError as error:
        parser.error(str(error))
    return asyncio.run(serve(args, key, os.environ.get(METRICS_TOKEN_ENV, ""), tls))


if __name__ == "__main__":
    sys.exit(main())
