"""Autoscaling on the whole system with real vLLM CPU engines: how fast a step of load is met,
whether steady load makes it flap, and what a scale-to-zero service's first caller sees.

1. Step: a service (min 1, max 4, qps threshold T: one instance's share) idles, then gets 3×T
   requests/s through the gateway. Seconds from the step to the `ScaledUp` decision and to
   the new instances serving (ready, so routed).
2. Steady: the same load for --steady seconds (600 by default). Scale events counted over it,
   Wharf's autoscaler against, in the same run, a naive one (no tolerance, no windows) fed the
   very same signals every 2 s (the gateways' reports and the ready count, read here).
3. Cold start: a `min: 0` service idles to zero, then --burst callers ask at once. Requests
   failed (target 0), the first and last answers' latency, and the engine's own start time
   (its InstanceCreated to InstanceReady events) for reference.

    .venv/bin/python benchmarks/autoscaling.py [--steady 600] [--threshold 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx
import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contracts.inflight import read_reports, service_load  # noqa: E402
from contracts.spec import parse_spec  # noqa: E402
from controlplane.services.tiny_model import write_tiny_model  # noqa: E402
from tests.rollout_support import events, instances, start_own_system, wait_until  # noqa: E402
from workers.scaling.autoscaler import TOLERANCE, Signals, State, decide  # noqa: E402

REDIS_DB = 6


def spec(name: str, autoscaler: dict) -> dict:
    return {"name": name, "llm": {"engine": "vllm-cpu", "model": "tiny-llama",
            "max_model_len": 512, "max_num_seqs": 8}, "metadata": {"instance": 1, "shm_size": 1},
            "autoscaler": autoscaler}  # fmt: skip


def deploy(system, body: dict) -> str:
    with system.api() as api:
        created = api.post("/services", json=body)
        created.raise_for_status()
    system.wait_phase(body["name"], {"running"}, timeout=600)
    return created.json()["token"]


def complete(system, token: str, name: str, timeout: float = 120) -> int:
    try:
        return httpx.post(
            f"{system.stack.gateway_url}/v1/completions",
            timeout=timeout,
            headers={"authorization": f"Bearer {token}"},
            json={"model": name, "prompt": "hello", "max_tokens": 4},
        ).status_code
    except httpx.HTTPError:
        return 0


class Load:
    """`rate` requests/s, open loop: sent on schedule whatever the answers take."""

    def __init__(self, system, token: str, name: str, rate: float) -> None:
        self.args, self.rate = (system, token, name), rate
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(64)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        started, n = time.monotonic(), 0
        while not self._stop.is_set():
            self._pool.submit(lambda: self.statuses.append(complete(*self.args)))
            n += 1
            self._stop.wait(max(0.0, started + n / self.rate - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)


def ready(system, name: str) -> int:
    return sum(1 for i in instances(system, name) if i["state"] == "ready")


def at(event: dict) -> float:
    return datetime.fromisoformat(event["created_at"].replace("Z", "+00:00")).timestamp()


def step_and_steady(system, args) -> dict:
    scaler = {
        "min": 1,
        "max": 4,
        "scaleStrategies": [{"metricName": "qps", "threshold": args.threshold}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
    }
    body = spec("step", scaler)
    token = deploy(system, body)
    time.sleep(15)  # idle
    load = Load(system, token, "step", 3 * args.threshold).start()
    t0 = time.time()
    try:
        wait_until(lambda: any(e["reason"] == "ScaledUp" for e in events(system, "step")), 120,
                   "a scale-up decision", 0.5)  # fmt: skip
        wait_until(lambda: ready(system, "step") >= 3, 600, "3 instances serving", 1)
        serving = time.time() - t0
        decision = at(next(e for e in events(system, "step") if e["reason"] == "ScaledUp")) - t0
        steady_from = time.time()
        ours, naive = replay(system, "step", body, steady_from + args.steady)
    finally:
        load.stop()
    changes = [e for e in events(system, "step")
               if e["reason"].startswith("Scaled") and at(e) >= steady_from]  # fmt: skip
    failed = sum(1 for s in load.statuses if s != 200)
    return {"decision_s": decision, "serving_s": serving, "steady_changes": len(changes),
            "replayed_ours": ours, "replayed_naive": naive, "requests": len(load.statuses),
            "failed": failed}  # fmt: skip


def replay(system, name: str, body: dict, until: float) -> tuple[int, int]:
    """Changes Wharf's autoscaler and a naive one decide on the same signals, every 2 s."""
    scaler = parse_spec(body).autoscaler
    assert scaler is not None
    naive = scaler.model_copy(deep=True)
    naive.behavior.scaleDown.stabilizationWindowSeconds = 0
    client = redis.Redis.from_url(system.stack.env["REDIS_URL"])
    states = {"ours": State(replicas=3), "naive": State(replicas=3)}
    changes = {"ours": 0, "naive": 0}
    while time.time() < until:
        qps, _, held = service_load(read_reports(client))
        for side, rules, tolerance in (("ours", scaler, TOLERANCE), ("naive", naive, 0.0)):
            # each side's own count is what the service's requests spread over
            signals = Signals(ready=states[side].replicas, qps=qps.get(name, 0.0))
            decision = decide(rules, states[side], signals, time.time(), tolerance)
            changes[side] += decision.replicas != states[side].replicas
            states[side] = decision.state
        time.sleep(2)
    return changes["ours"], changes["naive"]


def cold_start(system, args) -> dict:
    body = spec(
        "cold",
        {
            "min": 0,
            "max": 1,
            "scaleStrategies": [{"metricName": "concurrency", "threshold": 8}],
            "behavior": {"onZero": {"scaleDownGracePeriodSeconds": 10}},
        },
    )
    token = deploy(system, body)
    wait_until(lambda: not instances(system, "cold"), 180, "scaled to zero", 1)
    started = time.monotonic()
    latencies: list[float] = []

    def one() -> int:
        status = complete(system, token, "cold", timeout=600)
        latencies.append(time.monotonic() - started)
        return status

    with ThreadPoolExecutor(args.burst) as pool:
        statuses = list(pool.map(lambda _: one(), range(args.burst)))
    log = events(system, "cold")
    created = [at(e) for e in log if e["reason"] == "InstanceCreated"][-1]
    ready_at = [at(e) for e in log if e["reason"] == "InstanceReady"][-1]
    return {"failed": sum(1 for s in statuses if s != 200), "requests": len(statuses),
            "first_s": min(latencies), "last_s": max(latencies),
            "engine_start_s": ready_at - created}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steady", type=float, default=600, help="seconds of steady load")
    parser.add_argument("--threshold", type=float, default=2, help="qps one instance takes")
    parser.add_argument("--burst", type=int, default=4, help="callers of the cold service")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        write_tiny_model(home / "models" / "tiny-llama")
        system = start_own_system(home, args.redis, REDIS_DB, "wharf_autoscale_bench")
        try:
            step = step_and_steady(system, args)
            cold = cold_start(system, args)
        finally:
            system.remove_instances()
            system.stack.stop()
    print(
        f"step to {3 * args.threshold:g} requests/s (3 instances' worth): scale-up decided "
        f"{step['decision_s']:.1f} s after the step, 3 serving after {step['serving_s']:.1f} s; "
        f"{step['failed']} of {step['requests']} requests failed"
    )
    print(
        f"steady {args.steady:.0f} s: {step['steady_changes']} scale events; replayed on the "
        f"same signals: Wharf {step['replayed_ours']} changes, naive (no tolerance, no window) "
        f"{step['replayed_naive']}"
    )
    print(
        f"cold start from zero: {cold['failed']} of {cold['requests']} requests failed; first "
        f"answer {cold['first_s']:.1f} s, last {cold['last_s']:.1f} s (engine start "
        f"{cold['engine_start_s']:.1f} s)"
    )


if __name__ == "__main__":
    main()
