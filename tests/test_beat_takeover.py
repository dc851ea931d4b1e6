"""Two real beat processes (`celery beat` with workers.beat.LeaderScheduler) against real Redis:
one leads and sends the fleet-wide entries once per period while both run, each sends its own
host's entry, and when the leader is killed (SIGKILL: no clean stop) the other takes over
within one period, and that takeover is recorded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from contracts import beat

ROOT = Path(__file__).resolve().parent.parent
PERIOD = 2.0  # WHARF_RECONCILE_INTERVAL of both beats
LEASE = 1.6  # WHARF_BEAT_LEASE_S: a follower takes over within 1.25 leases = one period
FLEET_QUEUE = "celery"


def _start(node: str, redis_url: str, home: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(REDIS_URL=redis_url, WHARF_HOME=str(home), WHARF_NODE_NAME=node,
               WHARF_RECONCILE_INTERVAL=str(int(PERIOD)), WHARF_BEAT_LEASE_S=str(LEASE),
               PYTHONPATH=str(ROOT))  # fmt: skip
    log = (home / f"{node}.log").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.beat_app", "--quiet", "beat",
         "--schedule", str(home / f"schedule-{node}"), "--loglevel", "INFO"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def _sent(client: redis.Redis, queue: str) -> list[tuple[str, int]]:
    """(task, sending pid) of every message in `queue`, oldest first."""
    messages = [json.loads(raw) for raw in reversed(client.lrange(queue, 0, -1))]
    return [(m["headers"]["task"], int(m["headers"]["origin"][3:].split("@")[0]))
            for m in messages]  # fmt: skip


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout} s")


@pytest.fixture
def broker(redis_url):
    client = redis.Redis.from_url(redis_url)
    queues = [FLEET_QUEUE, "wharf.node.beat-a", "wharf.node.beat-b"]
    keys = [beat.LEASE_KEY, beat.TERM_KEY, beat.HANDOVERS_KEY, *queues]
    client.delete(*keys)
    yield client
    client.delete(*keys)


def test_one_beat_leads_and_a_killed_leader_is_taken_over_within_a_period(broker, redis_url,
                                                                          tmp_path):  # fmt: skip
    beats = {node: _start(node, redis_url, tmp_path) for node in ("beat-a", "beat-b")}
    try:
        leader = _wait(lambda: beat.leadership(broker)["leader"], 15, "leader")
        follower = "beat-b" if leader == "beat-a" else "beat-a"
        pids = {node: proc.pid for node, proc in beats.items()}
        broker.delete(FLEET_QUEUE, "wharf.node.beat-a", "wharf.node.beat-b")
        time.sleep(4 * PERIOD + 0.5)  # both running: four periods

        fleet = [pid for task, pid in _sent(broker, FLEET_QUEUE)
                 if task == "workers.tasks.reconcile_all"]  # fmt: skip
        assert set(fleet) == {pids[leader]}, "only the leader sends the fleet-wide pass"
        assert 3 <= len(fleet) <= 5, f"{len(fleet)} reconcile-all in four periods"
        for node in beats:  # each host's own entry, from each host's beat
            own = {pid for _, pid in _sent(broker, f"wharf.node.{node}")}
            assert own == {pids[node]}, node

        os.killpg(beats[leader].pid, signal.SIGKILL)
        killed = time.monotonic()
        _wait(lambda: beat.leadership(broker)["leader"] == follower, 3 * PERIOD, "takeover")
        took = time.monotonic() - killed
        assert took <= PERIOD + 0.5, f"the takeover took {took:.1f} s, a period is {PERIOD} s"
        event = beat.leadership(broker)["handovers"][0]
        assert (event["leader"], event["previous"], event["reason"]) == (
            follower, leader, beat.TAKEOVER)  # fmt: skip
        _wait(lambda: pids[follower] in [pid for _, pid in _sent(broker, FLEET_QUEUE)],
              2 * PERIOD, "reconcile-all from the new leader")  # fmt: skip
        assert "takes over from" in (tmp_path / f"{follower}.log").read_text()

        beats[follower].send_signal(signal.SIGTERM)  # a clean stop gives the lease back
        beats[follower].wait(15)
        assert beat.leadership(broker)["leader"] is None
    finally:
        for proc in beats.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
