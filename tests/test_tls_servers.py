"""The gateway (`python -m gateway`) and the API (`python -m controlplane`) as real processes
serving HTTPS from WHARF_TLS_CERT and WHARF_TLS_KEY: verified against the test's own CA, a
certificate replaced on disk served without a restart, and the console's HSTS and Secure
cookies present with TLS and absent without."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.tls_support import Authority, authority, server_pair

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return authority(tmp_path)


@pytest.fixture
def tls_env(tmp_path: Path, ca: Authority, redis_url: str) -> dict[str, str]:
    cert, key = tmp_path / "wharf.crt", tmp_path / "wharf.key"
    server_pair(ca, cert, key, "first")
    return {**plain_env(tmp_path, redis_url), "WHARF_TLS_CERT": str(cert),
            "WHARF_TLS_KEY": str(key)}  # fmt: skip


def plain_env(home: Path, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHARF_TLS_")}
    return {**env, "WHARF_HOME": str(home), "DATABASE_URL": "", "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "WHARF_TOKEN_KEY": "tls-test-token-key"}  # fmt: skip


def start(
    started: list, module: str, env: dict[str, str], *flags: str
) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--host", "127.0.0.1", "--port", str(port), *flags],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    started.append(process)
    return process, port


def wait_answer(process: subprocess.Popen, url: str, verify) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(url, verify=verify, trust_env=False, timeout=5)
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{url} never answered: {process.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)


def served_name(port: int, ca: Authority) -> str:
    """The common name of the certificate a new connection is served, verified by the CA."""
    context = ssl.create_default_context(cafile=ca.cert)
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        subject = dict(item[0] for item in tls.getpeercert()["subject"])
    return subject["commonName"]


@pytest.mark.timeout(60)
def test_the_gateway_serves_https_and_a_replaced_certificate_without_a_restart(
    started, tls_env, ca
):
    gateway, port = start(started, "gateway", tls_env)
    verify = ssl.create_default_context(cafile=ca.cert)
    answer = wait_answer(gateway, f"https://127.0.0.1:{port}/healthz", verify)
    assert answer.status_code == 200
    assert served_name(port, ca) == "first"
    with pytest.raises(httpx.TransportError):  # HTTPS only on that port
        httpx.get(f"http://127.0.0.1:{port}/healthz", trust_env=False, timeout=5)

    server_pair(ca, Path(tls_env["WHARF_TLS_CERT"]), Path(tls_env["WHARF_TLS_KEY"]), "second")
    assert served_name(port, ca) == "second"
    assert httpx.get(f"https://127.0.0.1:{port}/healthz", verify=verify).status_code == 200
    assert gateway.poll() is None  # the same process throughout


def negotiated(port: int, ca: Authority) -> tuple[str | None, bytes]:
    """The protocol ALPN settles on when a client offers h2 first, and the first frame
    header the server sends after the client's HTTP/2 preface (its SETTINGS, for HTTP/2)."""
    context = ssl.create_default_context(cafile=ca.cert)
    context.set_alpn_protocols(["h2", "http/1.1"])
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        protocol = tls.selected_alpn_protocol()
        if protocol != "h2":
            return protocol, b""
        # The preface and an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
        tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        return protocol, tls.recv(9)


@pytest.mark.timeout(60)
def test_the_gateway_serves_http2_when_asked_and_http_1_1_still(started, tls_env, ca):
    gateway, port = start(started, "gateway", tls_env, "--http2")
    verify = ssl.create_default_context(cafile=ca.cert)
    answer = wait_answer(gateway, f"https://127.0.0.1:{port}/healthz", verify)
    assert answer.status_code == 200 and answer.http_version == "HTTP/1.1"
    protocol, frame = negotiated(port, ca)
    assert protocol == "h2"
    assert frame[3] == 0x4  # the server's SETTINGS: it speaks HTTP/2


@pytest.mark.timeout(60)
def test_the_gateway_serves_http_1_1_only_by_default(started, tls_env, ca):
    gateway, port = start(started, "gateway", tls_env)
    wait_answer(
        gateway, f"https://127.0.0.1:{port}/healthz", ssl.create_default_context(cafile=ca.cert)
    )
    assert negotiated(port, ca)[0] in (None, "http/1.1")


@pytest.mark.timeout(60)
def test_the_console_over_https_sends_hsts_and_secure_cookies(started, tls_env, ca):
    api, port = start(started, "controlplane", tls_env)
    verify = ssl.create_default_context(cafile=ca.cert)
    page = wait_answer(api, f"https://127.0.0.1:{port}/login/", verify)
    assert page.status_code == 200
    assert page.headers["strict-transport-security"] == "max-age=31536000"
    csrf = page.headers["set-cookie"]
    assert csrf.startswith("csrftoken=") and "; Secure" in csrf
    # The probes answer over HTTPS as before, before any middleware.
    probe = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=verify, trust_env=False)
    assert probe.status_code == 200

    server_pair(ca, Path(tls_env["WHARF_TLS_CERT"]), Path(tls_env["WHARF_TLS_KEY"]), "second")
    assert served_name(port, ca) == "second"


@pytest.mark.timeout(60)
def test_the_console_over_plain_http_sends_neither(started, tmp_path, redis_url):
    api, port = start(started, "controlplane", plain_env(tmp_path, redis_url))
    page = wait_answer(api, f"http://127.0.0.1:{port}/login/", True)
    assert page.status_code == 200
    assert "strict-transport-security" not in page.headers
    csrf = page.headers["set-cookie"]
    assert csrf.startswith("csrftoken=") and "Secure" not in csrf


def test_a_bad_pair_stops_the_start_naming_the_variable(tmp_path, redis_url):
    env = {**plain_env(tmp_path, redis_url), "WHARF_TLS_CERT": str(tmp_path / "none.crt")}
    for module in ("gateway", "controlplane"):
        run = subprocess.run([sys.executable, "-m", module, "--port", "1"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        assert run.returncode == 2, run.stderr
        assert "set WHARF_TLS_KEY too" in run.stderr


@pytest.mark.parametrize("tls", [True, False])
def test_the_session_and_csrf_cookies_are_secure_exactly_with_tls(tls, tls_env, tmp_path):
    env = tls_env if tls else plain_env(tmp_path, tls_env["REDIS_URL"])
    run = subprocess.run([sys.executable, "manage.py", "diffsettings"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    lines = set(run.stdout.splitlines())
    assert ("SESSION_COOKIE_SECURE = True" in lines) is tls
    assert ("CSRF_COOKIE_SECURE = True" in lines) is tls
    assert ("SECURE_HSTS_SECONDS = 31536000" in lines) is tls


def test_make_run_serves_plain_http_whatever_the_environment(tls_env, monkeypatch):
    from launcher.management.commands.up import Command

    for name in ("WHARF_TLS_CERT", "WHARF_TLS_KEY"):
        monkeypatch.setenv(name, tls_env[name])
    env = Command().child_env("process")
    assert "WHARF_TLS_CERT" not in env and "WHARF_TLS_KEY" not in env
