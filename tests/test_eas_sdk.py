"""EAS's calling SDK (eas-prediction's PredictClient, from PyPI) through a real gateway process:
the token in clear (a custom URL) and signed (`Authorization: EAS <HMAC-SHA1>`); a stale Date, a
body changed after signing and another token's signature are 401s; the service's generated
token, a spec's fixed one and an API key all sign; no token is ever in clear in the routing
snapshot, the database or the gateway's log.

The control plane is the real API (tokens issued, sealed, published to Redis); the engine is a
small echo server (what it receives is what the gateway forwarded)."""

from __future__ import annotations

import datetime as real_datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from eas_prediction import PredictClient, StringRequest
from eas_prediction import predict_client as sdk
from eas_prediction.exception import PredictException

from contracts.routing import SNAPSHOT_KEY
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_snapshot
from controlplane.tokens.models import ApiKey, ServiceToken

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[1]
FIXED = "my-fixed-eas-token-0123456789"
BODY = '{"prompt": "hello, signed world"}'


class _Echo(BaseHTTPRequestHandler):
    """Answers a POST with what reached it: the body and the headers."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        answer = json.dumps({"body": body.decode(), "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _GatewayProcess:
    """`python -m gateway` as deployed, logging everything (DEBUG, access log) to a file."""

    def __init__(self, redis_url: str, token_key: str, log: Path) -> None:
        self.address = f"127.0.0.1:{_free_port()}"
        self.log = log
        env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url,
               "WHARF_TOKEN_KEY": token_key, "WHARF_GATEWAY_SNAPSHOT_POLL": "0.2"}  # fmt: skip
        host, port = self.address.split(":")
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway", "--host", host, "--port", port,
                 "--log-level", "DEBUG", "--access-log"],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            )  # fmt: skip

    def routes(self, service: str, token: str) -> None:
        """Wait until the gateway serves `service` with `token` (its snapshot loaded)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                answer = httpx.post(f"http://{self.address}/api/predict/{service}", content=b"{}",
                                    headers={"Authorization": token}, timeout=2)  # fmt: skip
                if answer.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"gateway never served {service}: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def deployed(api, store, settings, redis_url, engine, tmp_path) -> Iterator[dict]:
    """Services `echo` (a generated token) and `fixed` (the spec's token) on the echo engine,
    an API key for `echo`, published; a gateway process serving them."""
    tokens = {}
    for name, extra in (("echo", {}), ("fixed", {"token": FIXED})):
        spec = {"metadata": {"name": name, "instance": 1},
                "containers": [{"image": "registry.example/app:1", "command": "serve",
                                "port": 8000}], **extra}  # fmt: skip
        answer = api.post("/api/v1/services", spec, format="json")
        assert answer.status_code == 201, answer.json()
        tokens[name] = answer.json()["token"]
        Instance.objects.create(service=Service.objects.get(name=name), name=f"{name}-0",
                                node="n1", runtime="process", spec_hash="h", url=engine,
                                state=InstanceState.READY)  # fmt: skip
    answer = api.post("/api/v1/keys", {"name": "sdk", "services": ["echo"]}, format="json")
    assert answer.status_code == 201, answer.json()
    tokens["key"] = answer.json()["key"]
    publish_snapshot(force=True)
    gateway = _GatewayProcess(redis_url, settings.WHARF_TOKEN_KEY, tmp_path / "gateway.log")
    try:
        gateway.routes("echo", tokens["echo"])
        yield {"gateway": gateway, "tokens": tokens, "store": store}
    finally:
        gateway.stop()
        for left in (*store.scan_iter("wharf:usage:*"), *store.scan_iter("wharf:limit:*")):
            store.delete(left)  # what the gateway counted (the production prefixes)


def client(deployed: dict, service: str, token: str, *, signed: bool = True) -> PredictClient:
    address = deployed["gateway"].address
    if signed:
        made = PredictClient(address, service)
    else:  # a custom URL: the SDK sends the token itself
        made = PredictClient(address, service, custom_url=f"http://{address}/api/predict/{service}")
    made.set_token(token)
    made.set_retry_count(1)
    made.set_timeout(10_000)
    made.init()
    return made


def echoed(made: PredictClient) -> dict:
    return json.loads(made.predict(StringRequest(BODY)).response_data)


def refusal(made: PredictClient) -> tuple[int, dict]:
    with pytest.raises(PredictException) as raised:
        made.predict(StringRequest(BODY))
    return raised.value.code, json.loads(raised.value.message)["error"]


def test_the_sdk_calls_with_the_token_in_clear(deployed):
    answer = echoed(client(deployed, "echo", deployed["tokens"]["echo"], signed=False))
    assert answer["body"] == BODY
    assert "Authorization" not in answer["headers"]  # a caller's token never reaches engines


@pytest.mark.parametrize(("service", "token"), [("echo", "echo"), ("fixed", "fixed"),
                                                ("echo", "key")])  # fmt: skip
def test_the_sdk_calls_signed(deployed, service, token):
    answer = echoed(client(deployed, service, deployed["tokens"][token]))
    assert answer["body"] == BODY  # the body forwarded is the one signed for
    assert "Authorization" not in answer["headers"]


def test_a_stale_date_is_refused(deployed, monkeypatch):
    class _StaleClock:  # the SDK signs datetime.datetime.now(): 20 minutes ago
        class datetime:  # noqa: N801 (the module's name, as the SDK reads it)
            @staticmethod
            def now() -> real_datetime.datetime:
                return real_datetime.datetime.now() - real_datetime.timedelta(minutes=20)

    monkeypatch.setattr(sdk, "datetime", _StaleClock)
    status, error = refusal(client(deployed, "echo", deployed["tokens"]["echo"]))
    assert status == 401 and error["code"] == "invalid_date", error
    assert "minutes old" in error["message"]


def test_a_body_changed_after_signing_is_refused(deployed):
    made = client(deployed, "echo", deployed["tokens"]["echo"])
    headers = made.generate_singaure(bytearray(BODY, "utf-8"))  # the SDK's own signing
    tampered = BODY.replace("hello", "HELLO").encode()
    headers["Content-Length"] = str(len(tampered))
    answer = httpx.post(f"http://{deployed['gateway'].address}/api/predict/echo",
                        content=tampered, headers=headers)  # fmt: skip
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "content_md5_mismatch"


@pytest.mark.parametrize(
    ("service", "token"),
    [("echo", "wsk-not-this-services-token-000000"), ("echo", FIXED), ("fixed", "key")],
)
def test_another_tokens_signature_is_refused(deployed, service, token):
    token = deployed["tokens"].get(token, token)  # FIXED is fixed's; the key is echo's only
    status, error = refusal(client(deployed, service, token))
    assert status == 401 and error["code"] == "invalid_signature", error


def test_no_token_in_clear_in_the_snapshot_the_database_or_the_log(deployed):
    tokens = [t.encode() for t in deployed["tokens"].values()]
    for name, token in (("echo", "echo"), ("echo", "key"), ("fixed", "fixed")):
        echoed(client(deployed, name, deployed["tokens"][token]))
        echoed(client(deployed, name, deployed["tokens"][token], signed=False))
    snapshot = deployed["store"].get(SNAPSHOT_KEY)
    assert b"sealed_tokens" in snapshot and b"wharf-token:v1:" in snapshot
    stored = [t.sealed for t in ServiceToken.objects.all()]
    stored += [k.sealed for k in ApiKey.objects.all()]
    assert len(stored) == 3 and all(s.startswith("wharf-token:v1:") for s in stored)
    deployed["gateway"].stop()  # its log complete
    log = deployed["gateway"].log.read_bytes()
    assert b"POST /api/predict/echo" in log  # the access log was on
    for token in tokens:
        assert token not in snapshot and token not in log
        assert all(token.decode() not in s for s in stored)
    assert hashlib.md5(BODY.encode()).hexdigest().encode() not in log
