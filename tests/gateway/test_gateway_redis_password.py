"""Redis with a password (deploy/: compose, systemd, Kubernetes all set one): the gateway's
connections authenticate with the URL's password (redis://:PASSWORD@host), the limiter's own
included, and the workers' broker does too; without it Redis answers NOAUTH and nothing of
Wharf's passes. A real redis-server with requirepass on a free loopback port."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import kombu
import kombu.exceptions
import pytest
import redis
from gateway_support import Engine, Gateway, make_token, service, snapshot, unique

from gateway.limits.pipelined import PipelinedRedis

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server"),
]
PASSWORD = "redis-pw-7f3a"


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[int]:
    """A redis-server that requires PASSWORD, given on its standard input (as compose does,
    in no command line); its port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = f'requirepass {PASSWORD}\nport {port}\nbind 127.0.0.1\nsave ""\nappendonly no\n'
    process = subprocess.Popen(["redis-server", "-"], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, cwd=tmp_path)  # fmt: skip
    assert process.stdin is not None
    process.stdin.write(config.encode())
    process.stdin.close()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(port=port, password=PASSWORD) as client:
                    client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def test_every_connection_needs_the_password(password_redis: int) -> None:
    port = password_redis
    with pytest.raises(redis.AuthenticationError), redis.Redis(port=port) as client:
        client.ping()

    async def ping(url: str) -> object:
        pipe = PipelinedRedis(url, 2.0)
        try:
            return await pipe.call("PING")
        finally:
            await pipe.close()

    assert asyncio.run(ping(f"redis://:{PASSWORD}@127.0.0.1:{port}/0")) == b"PONG"
    with pytest.raises(redis.ConnectionError):
        asyncio.run(ping(f"redis://:wrong@127.0.0.1:{port}/0"))
    # The workers' Celery broker (kombu), from the same REDIS_URL.
    with kombu.Connection(f"redis://:{PASSWORD}@127.0.0.1:{port}/0") as broker:
        broker.ensure_connection(max_retries=1)
    bad = kombu.Connection(f"redis://:wrong@127.0.0.1:{port}/0")
    with pytest.raises(kombu.exceptions.OperationalError), bad:
        bad.ensure_connection(max_retries=1)


def test_a_gateway_on_a_password_redis_serves_and_keeps_its_limits_there(
    password_redis: int,
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{password_redis}/0"
    token, digest = make_token()
    name = unique("svc")
    svc = service(name, [engines[0].instance], [digest], rate_limit=1000)
    gateway = start_gateway(snapshot(1, svc), redis_url=url)
    body = {"model": name, "prompt": "x"}
    answer = http.post(gateway.url + "/v1/completions", json=body, headers={"Authorization": token})
    assert answer.status_code == 200, answer.text
    assert http.get(gateway.url + "/readyz").status_code == 200
    with redis.Redis.from_url(url) as client:  # the service's rate log is in that Redis
        assert client.zcard(f"{gateway.settings.limits_prefix}svc:{name}:rps") == 1
