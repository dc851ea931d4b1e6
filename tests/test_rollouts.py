"""Rolling updates, scale-down, stop, a broken version and its rollback, and a crashed engine,
on the whole system (API, Celery worker with its node agent, gateway, Redis, local processes)
under steady client traffic through the gateway in which every request is checked to its last
byte: what the in-memory fleet tests (tests/test_fleet.py) show of the decisions, shown here of
the requests.

The engine is tests/engines/slow_engine.py: every answer takes 1.5 s, so requests are in flight
whenever an instance is drained. One scenario runs the real vLLM CPU engine (tiny model)."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime

import httpx
import pytest

from controlplane.services.tiny_model import write_tiny_model
from tests.rollout_support import (
    VLLM_GAP,
    Traffic,
    call,
    delete,
    deploy,
    engine_pids,
    events,
    instances,
    slow_spec,
    start_own_system,
    summary,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REDIS_DB = 5  # this suite's own (tests/system.py uses 11 and 12)
BACKOFF_BASE = 2  # seconds: restarts after 2, 4, 8 ... s


@pytest.fixture(scope="module")
def system(tmp_path_factory, redis_url):
    home = tmp_path_factory.mktemp("wharf-rollouts")
    write_tiny_model(home / "models" / "tiny-llama")
    system = start_own_system(home, redis_url, REDIS_DB, "wharf_rollouts_process",
                              {"WHARF_BACKOFF_BASE": str(BACKOFF_BASE)})  # fmt: skip
    yield system
    system.remove_instances()  # of services a failed test left behind
    system.stack.stop()


def put(system, spec: dict) -> None:
    with system.api() as api:
        response = api.put(f"/services/{spec['name']}", json=spec)
        assert response.status_code == 200, response.text


def settled(system, name: str, count: int, spec_hash: str | None = None):
    """The instances once exactly `count` are ready (of `spec_hash`) and nothing else is left,
    draining ones included; falsy until then."""
    rows = instances(system, name)
    ready = [r for r in rows if r["state"] == "ready" and spec_hash in (None, r["spec_hash"])]
    return rows if len(rows) == len(ready) == count else None


def current_hash(system, name: str) -> str:
    with system.api() as api:
        (current,) = [v for v in api.get(f"/services/{name}/versions").json() if v["current"]]
    return current["spec_hash"]


def at(event: dict) -> float:
    return datetime.fromisoformat(event["created_at"].replace("Z", "+00:00")).timestamp()


def assert_no_failure(traffic: Traffic, since: float, what: str) -> list:
    results = traffic.between(since)
    assert results and all(r.ok for r in results), f"{what}: {summary(results)}"
    return results


def assert_drains_waited_for_streams(system, name: str, traffic: Traffic, since: float) -> int:
    """Each instance drained after `since` (time.time()) was stopped because its requests
    finished (not at its grace), and at least one had a request in flight when it left routing
    that still completed; how many were drained."""
    log = events(system, name)
    draining = {e["instance"]: at(e) for e in log
                if e["reason"] == "InstanceDraining" and at(e) >= since}  # fmt: skip
    assert draining, log
    removed = [e for e in log if e["reason"] == "InstanceRemoved" and e["instance"] in draining]
    assert len(removed) == len(draining), log
    assert all("its requests finished" in e["message"] for e in removed), removed
    spanning = [r for r in traffic.between(0) if r.instance in draining and r.ok
                and r.ended_at > draining[r.instance]]  # fmt: skip
    assert spanning, "no request was in flight at a drained instance"
    return len(draining)


def test_update_scale_down_and_stop_fail_no_request(system):
    name = "rollouts-slow"
    token = deploy(system, slow_spec(name, instances=3, version="1"))
    traffic = Traffic(system.stack.gateway_url, name, token, threads=4).start()
    try:
        begin = time.monotonic()
        traffic.wait_for(8, begin)

        # A rolling update: an env change is a new spec hash; one new instance at a time
        # (max_surge 1), an old one drained once a new one is ready.
        update, update_at = time.monotonic(), time.time()
        put(system, slow_spec(name, instances=3, version="2"))
        new_hash = current_hash(system, name)
        seen_ready = []

        def updated():
            rows = instances(system, name)
            seen_ready.append(sum(r["state"] == "ready" for r in rows))
            return settled(system, name, 3, new_hash)

        wait_until(updated, 120, "updated", interval=0.5)
        traffic.wait_for(8, time.monotonic())
        results = assert_no_failure(traffic, update, "during the rolling update")
        assert {r.version for r in results} == {"1", "2"}
        assert min(seen_ready) >= 3, seen_ready  # never fewer ready than replicas
        assert {r.version for r in traffic.between(time.monotonic() - 1)} <= {"2"}
        assert assert_drains_waited_for_streams(system, name, traffic, update_at) == 3

        # Scale-down 3 -> 1: two instances drained while they serve.
        scale, scale_at = time.monotonic(), time.time()
        put(system, slow_spec(name, instances=1, version="2"))
        wait_until(lambda: settled(system, name, 1, new_hash), 120, "scaled down")
        traffic.wait_for(8, time.monotonic())
        assert_no_failure(traffic, scale, "during the scale-down")
        assert assert_drains_waited_for_streams(system, name, traffic, scale_at) == 2

        # Stop: requests sent before it must complete; after it, refused cleanly (503) or
        # still served while the gateway loads the snapshot without the service's instances.
        with system.api() as api:
            stop = time.monotonic()
            assert api.post(f"/services/{name}/stop").status_code in (200, 202)
        system.wait_phase(name, {"stopped"}, timeout=120)
        stopped = time.monotonic()
        time.sleep(1)
    finally:
        traffic.stop()
    before = traffic.between(scale, stop)
    assert before and all(r.ok for r in before), f"sent before the stop: {summary(before)}"
    assert [r for r in before if r.ended > stop], "no request was in flight at the stop"
    after = traffic.between(stop)
    broken = [r for r in after if not r.ok and r.status != 503]
    assert not broken, f"sent after the stop: {summary(broken)}"
    assert all(not r.ok for r in traffic.between(stopped)), "served after the stop completed"
    assert [r for r in after if r.status == 503], "nothing was refused after the stop"
    delete(system, name)


def test_a_broken_version_pauses_and_rollback_restores_the_old_spec(system):
    name = "rollouts-broken"
    good = slow_spec(name, instances=2, version="1")
    token = deploy(system, good)
    old_hash = current_hash(system, name)
    old_names = sorted(r["name"] for r in instances(system, name))
    traffic = Traffic(system.stack.gateway_url, name, token, threads=3).start()
    try:
        begin = time.monotonic()
        traffic.wait_for(6, begin)
        broken = slow_spec(name, instances=2, version="2")
        broken["containers"][0]["command"] = "echo 'no such model' >&2; exit 3"
        put(system, broken)

        def paused():
            with system.api() as api:
                service = api.get(f"/services/{name}").json()
            return service if "rollout paused" in service["progress"] else None

        service = wait_until(paused, 60, "paused")
        assert service["phase"] == "updating", service
        assert "exited with code 3" in service["progress"], service
        reasons = {e["reason"] for e in events(system, name)}
        assert "RolloutPaused" in reasons
        time.sleep(2 * BACKOFF_BASE + 3)  # it stays paused through a restart of the new one
        rows = instances(system, name)
        assert sorted(r["name"] for r in rows if r["state"] == "ready") == old_names, rows
        assert len(rows) == 3, rows  # one new instance only: nothing more while paused
        traffic.wait_for(6, time.monotonic())
        assert_no_failure(traffic, begin, "while the rollout was paused")

        rollback = time.monotonic()
        with system.api() as api:
            response = api.post(f"/services/{name}/rollback", json={})
            assert response.status_code == 200, response.text
            versions = api.get(f"/services/{name}/versions").json()
        assert [v["number"] for v in versions] == [3, 2, 1]
        assert versions[0]["current"] and versions[0]["note"] == "rollback to version 1"
        assert versions[0]["spec_hash"] == old_hash
        system.wait_phase(name, {"running"}, timeout=60)
        rows = wait_until(lambda: settled(system, name, 2, old_hash), 60, "rolled back")
        assert sorted(r["name"] for r in rows) == old_names  # the old instances never left
        # The new version's instance was never routed (and its engine had ended): its drain
        # ends at once all the same, not after the grace (30 s).
        (removed,) = [e for e in events(system, name) if e["reason"] == "InstanceRemoved"]
        assert removed["message"].endswith(("its requests finished", "it ended")), removed
        traffic.wait_for(6, time.monotonic())
    finally:
        traffic.stop()
    assert_no_failure(traffic, begin, "through the pause and the rollback")
    assert {r.version for r in traffic.between(rollback)} == {"1"}
    assert "RolledBack" in {e["reason"] for e in events(system, name)}
    delete(system, name)


def test_a_killed_engine_comes_back_after_a_growing_back_off(system):
    name = "rollouts-killed"
    token = deploy(system, slow_spec(name, instances=1))
    (instance,) = instances(system, name)
    for restart in (1, 2):
        (pid,) = engine_pids(system, name).values()
        os.kill(pid, signal.SIGKILL)
        delay = BACKOFF_BASE * 2 ** (restart - 1)
        wanted = f"restart {restart} in {delay} s"

        def exited(wanted=wanted):
            log = [e for e in events(system, name) if e["reason"] == "InstanceExited"]
            return log if log and wanted in log[-1]["message"] else None

        (*_, event) = wait_until(exited, 30, f"an InstanceExited event with {wanted!r}")
        assert event["instance"] == instance["name"] and "code -9" in event["message"], event
        wait_until(lambda: settled(system, name, 1), 30 + delay, "back")
        back = engine_pids(system, name)
        assert list(back) == [instance["name"]] and back[instance["name"]] != pid
        started = [e for e in events(system, name) if e["reason"] == "InstanceStarted"]
        assert at(started[-1]) - at(event) >= delay - 0.5  # not before its back-off
        with httpx.Client(timeout=30) as client:  # routed once the next snapshot is out
            wait_until(lambda: call(client, system.stack.gateway_url, name, token,
                                    "openai-stream").ok, 15, "routed again")  # fmt: skip
    delete(system, name)


def test_tiny_vllm_rolling_update_and_canary_release_fail_no_request(system):
    """The real engine once: a rolling update of a vLLM CPU service (two engines briefly),
    then a healthy canary of it, promoted."""
    name = "rollouts-vllm"
    spec = {
        "name": name,
        "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "served_model_name": f"{name}-model",
                "max_model_len": 512, "max_num_seqs": 4},
        "metadata": {"instance": 1, "shm_size": 1},
    }  # fmt: skip
    token = deploy(system, spec)
    (old,) = instances(system, name)
    traffic = Traffic(
        system.stack.gateway_url, name, token, threads=2, engine="vllm", gap=VLLM_GAP
    ).start()
    try:
        begin = time.monotonic()
        traffic.wait_for(4, begin)
        spec["llm"]["max_num_seqs"] = 3  # a new spec hash
        put(system, spec)
        new_hash = current_hash(system, name)
        rows = wait_until(lambda: settled(system, name, 1, new_hash), 600, "updated", 1)
        assert rows[0]["name"] != old["name"]
        traffic.wait_for(4, time.monotonic())
    finally:
        traffic.stop()
    results = assert_no_failure(traffic, begin, "during the vLLM rolling update")
    assert {r.instance for r in results} == {old["name"], rows[0]["name"]}

    # Then a canary of the same service (a new spec hash), healthy: 50 %, then promoted, and
    # no request fails over the whole release. Its latency bounds are out of reach: on two
    # busy cores a fresh engine beside a warm one was 30x slower between tokens for a while
    # (120 ms against 4 ms), and that is not what this checks.
    canary = {**spec, "llm": {**spec["llm"], "max_num_seqs": 2}}
    traffic = Traffic(
        system.stack.gateway_url, name, token, threads=2, engine="vllm", gap=VLLM_GAP
    ).start()
    try:
        begin = time.monotonic()
        release = start_canary(system, name, canary, steps=[50, 100], interval_s=10,
                               min_requests=4, max_ttft_ratio=1000, max_itl_ratio=1000)  # fmt: skip
        assert release["state"] == "starting"
        done = wait_until(lambda: canary_done(system, name), 600, "the canary judged", 1)
        assert done["state"] == "promoted", done
        rows = wait_until(lambda: settled(system, name, 1, current_hash(system, name)), 300,
                          "promoted", 1)  # fmt: skip
        traffic.wait_for(4, time.monotonic())
    finally:
        traffic.stop()
    results = assert_no_failure(traffic, begin, "during the vLLM canary release")
    served = {r.instance for r in results}
    assert rows[0]["name"] in served and len(served) == 2  # the canary's, then the only one
    steps = [e["message"] for e in events(system, name) if e["reason"] == "CanaryStep"]
    assert steps and steps[0].startswith("50% of calls to the canary"), steps
    delete(system, name)


def start_canary(system, name: str, spec: dict, **settings) -> dict:
    with system.api() as api:
        response = api.post(f"/services/{name}/canary", json={"spec": spec, **settings})
        assert response.status_code == 201, response.text
    return response.json()


def canary_done(system, name: str) -> dict | None:
    with system.api() as api:
        release = api.get(f"/services/{name}/canary").json()
    return release if release["state"] in ("promoted", "rolled_back", "aborted") else None


def with_delay(spec: dict, delay: float) -> dict:
    env = [e for e in spec["containers"][0]["env"] if e["name"] != "CHUNK_DELAY"]
    env.append({"name": "CHUNK_DELAY", "value": str(delay)})
    return {**spec, "containers": [{**spec["containers"][0], "env": env}]}


def test_a_slow_canary_rolls_itself_back_within_an_interval_and_no_call_fails(system):
    """Its engine is 4x slower per token: rolled back by the controller within one
    interval of the breach showing, having served about its step's share, while the stable
    version answers every call."""
    name = "rollouts-canary"
    token = deploy(system, with_delay(slow_spec(name, version="1"), 0.05))
    traffic = Traffic(system.stack.gateway_url, name, token, threads=4).start()
    try:
        begin = time.monotonic()
        traffic.wait_for(8, begin)
        slow = with_delay(slow_spec(name, version="2"), 0.2)
        start_canary(system, name, slow, steps=[25, 100], interval_s=30, min_requests=6)
        done = wait_until(lambda: canary_done(system, name), 240, "the canary judged", 0.5)
        traffic.wait_for(8, time.monotonic())
    finally:
        traffic.stop()
    assert done["state"] == "rolled_back", done
    # Its first token comes 4x later too (a token's delay, or a whole answer unstreamed):
    # whichever latency breaks its bound first is named.
    assert "TTFT p" in done["message"] or "inter-token latency p" in done["message"], done
    results = assert_no_failure(traffic, begin, "during the canary release")
    log = events(system, name)
    running = next(at(e) for e in log if e["reason"] == "CanaryStep")
    rolled = next(at(e) for e in log if e["reason"] == "CanaryRolledBack")
    assert rolled - running <= 30 + 5, log  # within one interval (and a controller pass)
    during = [r for r in results if running <= r.ended_at <= rolled]
    share = sum(r.version == "2" for r in during) / len(during)
    assert 0 < share <= 0.25 + 0.1, share  # about its step's share, never more
    wait_until(lambda: settled(system, name, 1), 120, "the canary's instance removed")
    assert {r["spec_hash"] for r in instances(system, name)} == {current_hash(system, name)}
    delete(system, name)
