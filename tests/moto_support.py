"""A real S3-compatible server (moto's, in its own process on loopback) for storage tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config

KEY_ID = "AKIAWHARFTEST0000001"
SECRET = "wharf-Sup3r-s3cret-value-do-not-print"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Moto:
    """The moto server process plus helpers that talk to its /moto-api/."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _post(self, path: str, data: bytes = b"") -> bytes:
        # text/plain: with urllib's default form type Flask would swallow the body.
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method="POST", headers={"Content-Type": "text/plain"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return bytes(response.read())

    def record(self) -> Recording:
        return Recording(self)

    def require_auth(self, on: bool) -> None:
        # With no free unauthenticated actions, moto checks keys against its IAM backend.
        self._post("/moto-api/reset-auth", b"0" if on else b"inf")


class Recording:
    """`with moto.record() as rec:` collects every request the server saw in the block."""

    def __init__(self, moto: Moto) -> None:
        self.moto = moto
        self.requests: list[dict[str, Any]] = []

    def __enter__(self) -> Recording:
        self.moto._post("/moto-api/recorder/reset-recording")
        self.moto._post("/moto-api/recorder/start-recording")
        return self

    def __exit__(self, *exc: object) -> None:
        self.moto._post("/moto-api/recorder/stop-recording")
        with urllib.request.urlopen(
            f"{self.moto.url}/moto-api/recorder/download-recording", timeout=10
        ) as response:
            text = response.read().decode()
        self.requests = [json.loads(line) for line in text.splitlines() if line.strip()]

    def object_gets(self, bucket: str) -> list[dict[str, Any]]:
        """GET/HEAD requests for objects (path style: /bucket/key), not bucket listings."""
        found = []
        for request in self.requests:
            path = urlsplit(request["url"]).path
            key = path[len(bucket) + 2 :] if path.startswith(f"/{bucket}/") else ""
            if request["method"] in ("GET", "HEAD") and key:
                found.append(request)
        return found

    def listings(self, bucket: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self.requests
            if r["method"] == "GET"
            and urlsplit(r["url"]).path.rstrip("/") == f"/{bucket}"
            and "list-type=2" in r["url"]
        ]


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    port = free_port()
    workdir = tmp_path_factory.mktemp("moto")
    env = {
        **os.environ,
        "MOTO_RECORDER_FILEPATH": str(workdir / "recording.jsonl"),
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)
    try:
        yield Moto(url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def s3(moto: Moto) -> Any:
    """A plain boto3 client for arranging buckets, as a user would upload a model."""
    return boto3.client(
        "s3",
        endpoint_url=moto.url,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        config=Config(s3={"addressing_style": "path"}),
    )
