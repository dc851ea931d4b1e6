"""Building blocks for the gateway tests: real uvicorn servers on loopback, and snapshots."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import redis
import uvicorn
from starlette.types import ASGIApp
from upstream_app import Recorder

from contracts.routing import RoutedInstance, RoutedService, Snapshot
from contracts.tokens import SERVICE_TOKEN_PREFIX, new_token, token_digest
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
