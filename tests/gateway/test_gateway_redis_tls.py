"""A gateway on a Redis reached over TLS (rediss://): the URL's TLS options (the CA to trust,
whether to check) reach every connection it makes, the limiter's own included."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from gateway_support import Engine, Gateway, make_token, metric, service, snapshot, unique

from gateway.limits.pipelined import PipelinedRedis

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        not (shutil.which("redis-server") and shutil.which("openssl")),
        reason="needs redis-server (built with TLS) and openssl",
    ),
]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificates(where: Path) -> tuple[Path, Path, Path]:
    """A CA of the test's own, and a certificate it signed for 127.0.0.1."""
    ca_key, ca, key, csr, cert = (
        where / n for n in ("ca.key", "ca.pem", "s.key", "s.csr", "s.pem")
    )
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    extensions = where / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "1", "-out", str(cert),
             "-extfile", str(extensions))  # fmt: skip
    return ca, cert, key


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A redis-server speaking only TLS on a free loopback port; (port, the CA to trust)."""
    ca, cert, key = _certificates(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
         "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis.from_url(url) as client:
                    client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port, ca
    finally:
        process.terminate()
        process.wait(10)


def test_the_limiters_connection_trusts_the_ca_the_url_names(tls_redis: tuple[int, Path]) -> None:
    port, ca = tls_redis

    async def ping(url: str) -> object:
        pipe = PipelinedRedis(url, 2.0)
        try:
            return await pipe.call("PING")
        finally:
            await pipe.close()

    assert asyncio.run(ping(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}")) == b"PONG"
    # Not checking at all is the operator's choice to make, in the URL.
    assert asyncio.run(ping(f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none")) == b"PONG"
    # Without the CA, the server's certificate is refused.
    with pytest.raises(redis.ConnectionError):
        asyncio.run(ping(f"rediss://127.0.0.1:{port}/0"))


def test_a_gateway_on_a_tls_redis_shares_its_limits_there(
    tls_redis: tuple[int, Path],
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
) -> None:
    port, ca = tls_redis
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    token, digest = make_token()
    name = unique("svc")
    svc = service(name, [engines[0].instance], [digest], rate_limit=1000)
    gateway = start_gateway(snapshot(1, svc), redis_url=url)
    body = {"model": name, "prompt": "x"}
    answer = http.post(gateway.url + "/v1/completions", json=body, headers={"Authorization": token})
    assert answer.status_code == 200
    assert metric(gateway.metrics(), "wharf_gateway_redis_up") == 1
    with redis.Redis.from_url(url) as client:  # the service's rate log is in the TLS Redis
        assert client.zcard(f"{gateway.settings.limits_prefix}svc:{name}:rps") == 1
