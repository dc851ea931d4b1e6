"""Autoscaling on the whole system with real vLLM CPU engines: a service scales from 1 to 2
under load through the gateway and back to 1 after its scale-down window; a `min: 0` service
stops when idle and serves its next request, held by the gateway while an instance starts."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from controlplane.services.tiny_model import write_tiny_model
from tests.rollout_support import events, instances, wait_until
from tests.system import System, start_system

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
REDIS_DB = 10  # this suite's own


@pytest.fixture(scope="module")
def system(tmp_path_factory, redis_url):
    home = tmp_path_factory.mktemp("wharf-autoscale")
    write_tiny_model(home / "models" / "tiny-llama")
    system = start_system("process", home, home / "models", redis_url, {},
                          redis_number=REDIS_DB, database="wharf_autoscale_e2e",
                          token_name="autoscale")  # fmt: skip
    yield system
    system.remove_instances()
    system.stack.stop()


def spec(name: str, autoscaler: dict) -> dict:
    return {
        "name": name,
        "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "max_model_len": 512,
                "max_num_seqs": 4},
        "metadata": {"instance": 1, "shm_size": 1},
        "autoscaler": autoscaler,
    }  # fmt: skip


def create(system: System, body: dict) -> str:
    """The service's token; it is not waited for."""
    with system.api() as api:
        created = api.post("/services", json=body)
        assert created.status_code == 201, created.text
    return created.json()["token"]


def complete(system: System, token: str, name: str, timeout: float = 60) -> httpx.Response:
    return httpx.post(f"{system.stack.gateway_url}/v1/completions", timeout=timeout,
                      headers={"authorization": f"Bearer {token}"},
                      json={"model": name, "prompt": "hello", "max_tokens": 2})  # fmt: skip


def ready(system: System, name: str) -> int:
    return sum(1 for i in instances(system, name) if i["state"] == "ready")


def scale_events(system: System, name: str) -> list[dict]:
    return [e for e in events(system, name) if e["reason"].startswith("Scaled")]


def test_load_scales_one_out_and_back_while_an_idle_min_zero_one_stops_and_wakes(system):
    """Two services at once, so their engines start together: "busy" scales from 1 to 2
    under load and back to 1 after its window; meanwhile the idle "sleepy" (min 0) stops, and
    its next request is held by the gateway while an instance starts."""
    sleepy = create(system, spec("sleepy", {
        "min": 0, "max": 1, "scaleStrategies": [{"metricName": "concurrency", "threshold": 4}],
        "behavior": {"onZero": {"scaleDownGracePeriodSeconds": 5}}}))  # fmt: skip
    token = create(system, spec("busy", {
        "min": 1, "max": 2, "scaleStrategies": [{"metricName": "qps", "threshold": 1}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 20}}}))  # fmt: skip
    system.wait_phase("busy", {"running"}, timeout=600)
    stop, statuses = threading.Event(), []

    def load() -> None:  # about 3 requests/s: three times what one instance is meant to take
        while not stop.is_set():
            statuses.append(complete(system, token, "busy").status_code)
            stop.wait(0.3)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        wait_until(lambda: ready(system, "busy") == 2, 300, "scaled out to 2 ready instances", 1)
    finally:
        stop.set()
        thread.join()
    (up,) = scale_events(system, "busy")
    assert up["reason"] == "ScaledUp" and "instances: 1 → 2: qps" in up["message"]
    assert statuses and set(statuses) == {200}
    idle_since = time.monotonic()

    # While busy waits out its window: sleepy, idle since it started, has stopped.
    wait_until(lambda: not instances(system, "sleepy"), 120, "sleepy scaled to zero", 1)
    with system.api() as api:
        body = api.get("/services/sleepy").json()
    assert body["phase"] == "running" and body["replicas"] == {"": 0}
    started = time.monotonic()
    answer = complete(system, sleepy, "sleepy", timeout=400)  # held while an engine starts
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 2
    assert time.monotonic() - started > 1  # it did wait for a start
    reasons = [e["reason"] for e in scale_events(system, "sleepy")]
    assert reasons == ["ScaledToZero", "ScaledFromZero"]

    wait_until(lambda: len(instances(system, "busy")) == 1, 120, "busy back to 1 instance", 1)
    assert time.monotonic() - idle_since >= 20 - 11  # the window (qps averages over 10 s)
    down = scale_events(system, "busy")[-1]
    assert down["reason"] == "ScaledDown" and "instances: 2 → 1" in down["message"]
    assert complete(system, token, "busy").status_code == 200
