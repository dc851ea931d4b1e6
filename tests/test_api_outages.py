"""The API while PostgreSQL cannot be reached, then can again: a real API process (uvicorn, as
`make run` and production start it) reaches the test database through a TCP forwarder the test
stops and starts. Down, every call is a 503 that names the database, with retry-after (not a
500); back, the API answers as before without a restart. And the sessions the API opens: its
requests share a pool of them."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from tests.api_support import client_for
from tests.live_api import LiveApi, database_url

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="an outage of PostgreSQL"),
    pytest.mark.timeout(90),
]


class Forwarder:
    """127.0.0.1:<port> → the database's address, byte for byte, until stopped (every
    connection cut, as a database that went away cuts them)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self.port = listener.getsockname()[1]
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, args=(listener,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _serve(self, listener: socket.socket) -> None:
        chooser = selectors.DefaultSelector()
        chooser.register(listener, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        while not self._stop.is_set():
            for key, _ in chooser.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is listener:
                    client, _ = listener.accept()
                    upstream = socket.create_connection(self.target)
                    peers[client], peers[upstream] = upstream, client
                    chooser.register(client, selectors.EVENT_READ)
                    chooser.register(upstream, selectors.EVENT_READ)
                    continue
                data = sock.recv(65536)
                if data:
                    peers[sock].sendall(data)
                    continue
                for end in (sock, peers.pop(sock)):
                    peers.pop(end, None)
                    chooser.unregister(end)
                    end.close()
        for sock in [listener, *peers]:
            sock.close()
        chooser.close()


def test_the_api_answers_503_naming_the_database_while_it_is_down(redis_url, tmp_path):
    token = client_for("alice")._credentials["HTTP_AUTHORIZATION"]
    db = connection.settings_dict
    forwarder = Forwarder((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    forwarder.start()
    live = LiveApi(redis_url, tmp_path, database_url("127.0.0.1", forwarder.port), wait=False)
    api = live.process
    url = f"{live.url}/api/v1/services"
    headers = {"Authorization": token}

    def answer() -> httpx.Response | None:
        try:
            return httpx.get(url, headers=headers, timeout=10, trust_env=False)
        except httpx.TransportError:
            return None

    def until(check, seconds: float = 30) -> httpx.Response:  # noqa: ANN001
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = answer()
            if found is not None and check(found):
                return found
            assert api.poll() is None, "the API exited"
            time.sleep(0.2)
        raise AssertionError("timed out")

    try:
        until(lambda r: r.status_code == 200)
        forwarder.stop()
        down = until(lambda r: r.status_code != 200)
        assert down.status_code == 503, down.text
        assert down.json()["unavailable"] == "database"
        assert "database cannot be reached now" in down.json()["detail"]
        assert down.headers["retry-after"] == "5"
        forwarder.start()  # back, on the same port
        until(lambda r: r.status_code == 200)  # no restart needed
    finally:
        forwarder.stop()
        live.stop()


def sessions_opened() -> int:
    """PostgreSQL sessions opened on the test database so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_the_apis_requests_share_a_pool_of_database_sessions(redis_url, tmp_path):
    """Django runs each request on a thread of its own, and keeps a connection per thread:
    without the API's pool (controlplane.asgi) each of these calls opened a session."""
    token = client_for("alice")._credentials["HTTP_AUTHORIZATION"]
    live = LiveApi(redis_url, tmp_path)
    headers = {"Authorization": token}
    try:
        with httpx.Client(base_url=live.url, headers=headers, trust_env=False) as api:
            assert api.get("/api/v1/services").status_code == 200  # the pool is open
            before = sessions_opened()
            for _ in range(40):
                assert api.get("/api/v1/services").status_code == 200
            time.sleep(1)  # a session that ended is counted by then
            assert sessions_opened() - before <= 2
    finally:
        live.stop()
