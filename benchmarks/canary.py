"""Canary releases that judge themselves, on the whole system (API, worker with its node agent
and canary controller, gateway, Redis, local processes) under steady client traffic through
the gateway, every answer checked to its last byte (tests/rollout_support.py's Traffic):

a. a canary whose engine is 3x slower (time to first token and between tokens), and one that
   fails every fifth call, each beside a healthy stable version (tests/engines/slow_engine.py):
   seconds from the breach showing (the canary's first step beginning: the figures are
   there to see from then) to the rollback, against the interval; the canary's share of the
   calls while it ran, against its step's; calls failed for the callers other than the
   canary's own failures (target 0);
b. a healthy canary of the tiny vLLM CPU service, 50 % then promoted: calls failed over the
   whole release (target 0) and seconds from start to promotion;
c. the weighted split: 2,000 calls with the canary held at 10 %: its share (target 10 ± 2 %).

Each figure is printed beside its target, in one run:

    .venv/bin/python benchmarks/canary.py [--interval 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from controlplane.services.tiny_model import write_tiny_model  # noqa: E402
from tests.rollout_support import (  # noqa: E402
    Traffic,
    delete,
    deploy,
    events,
    slow_spec,
    start_own_system,
    wait_until,
)

REDIS_DB = 7
REDIS_URL = "redis://127.0.0.1:6379"
ROWS: list[tuple[str, str, str, bool]] = []


def report(figure: str, measured: str, target: str, ok: bool) -> None:
    ROWS.append((figure, measured, target, ok))
    print(f"  {figure:<52} {measured:>14}   target {target:<14} {'ok' if ok else 'MISSED'}",
          flush=True)  # fmt: skip


def engine(name: str, version: str, delay: float, **env: str) -> dict:
    spec = slow_spec(name, version=version)
    pairs = [e for e in spec["containers"][0]["env"] if e["name"] != "CHUNK_DELAY"]
    pairs += [{"name": "CHUNK_DELAY", "value": str(delay)}]
    pairs += [{"name": k, "value": v} for k, v in env.items()]
    return {**spec, "containers": [{**spec["containers"][0], "env": pairs}]}


def release(system, name: str, spec: dict, **settings) -> None:
    with system.api() as api:
        api.post(f"/services/{name}/canary", json={"spec": spec, **settings}).raise_for_status()


def outcome(system, name: str, timeout: float) -> dict:
    def done():
        with system.api() as api:
            found = api.get(f"/services/{name}/canary").json()
        return found if found["state"] in ("promoted", "rolled_back", "aborted") else None

    return wait_until(done, timeout, "the canary's outcome", 0.5)


def at(event: dict) -> float:
    return datetime.fromisoformat(event["created_at"].replace("Z", "+00:00")).timestamp()


def bad_canary(system, name: str, canary: dict, interval: int, step: int, what: str) -> None:
    token = deploy(system, engine(name, "1", 0.05))
    traffic = Traffic(system.stack.gateway_url, name, token, threads=4).start()
    try:
        traffic.wait_for(8, time.monotonic())
        begin = time.monotonic()
        release(system, name, canary, steps=[step, 100], interval_s=interval, min_requests=10)
        found = outcome(system, name, 300)
        traffic.wait_for(4, time.monotonic())
    finally:
        traffic.stop()
    log = events(system, name)
    running = next(at(e) for e in log if e["reason"] == "CanaryStep")
    rolled = next(at(e) for e in log if e["reason"] == "CanaryRolledBack")
    results = traffic.between(begin)
    during = [r for r in results if running <= r.ended_at <= rolled]
    share = sum(r.version == "2" for r in during) / max(len(during), 1)
    other_failures = [r for r in results if not r.ok and r.version != "2"]
    print(f"{what}: {found['state']}: {found['message'][:150]}")
    report(f"{what}: rolled back", found["state"], "rolled_back", found["state"] == "rolled_back")
    report(f"{what}: s from breach showing to rollback", f"{rolled - running:.1f}",
           f"<= {interval}", rolled - running <= interval)  # fmt: skip
    report(f"{what}: canary's share while it ran", f"{share:.1%}", f"<= {step}%",
           share <= step / 100 + 0.05)  # fmt: skip
    report(f"{what}: other calls failed", str(len(other_failures)), "0", not other_failures)
    delete(system, name)


def healthy_vllm(system, interval: int) -> None:
    name = "bench-canary-vllm"
    spec = {"name": name, "llm": {"engine": "vllm-cpu", "model": "tiny-llama",
            "served_model_name": f"{name}-model", "max_model_len": 512, "max_num_seqs": 4},
            "metadata": {"instance": 1, "shm_size": 1}}  # fmt: skip
    token = deploy(system, spec)
    traffic = Traffic(system.stack.gateway_url, name, token, threads=2, engine="vllm").start()
    try:
        traffic.wait_for(4, time.monotonic())
        begin = time.monotonic()
        canary = {**spec, "llm": {**spec["llm"], "max_num_seqs": 2}}
        release(system, name, canary, steps=[50, 100], interval_s=interval, min_requests=10,
                max_ttft_ratio=20, max_itl_ratio=20)  # fmt: skip
        found = outcome(system, name, 900)
        promoted = time.monotonic() - begin
        time.sleep(5)  # the old instance drained under traffic
    finally:
        traffic.stop()
    results = traffic.between(begin)
    failed = [r for r in results if not r.ok]
    report("healthy vLLM canary: outcome", found["state"], "promoted",
           found["state"] == "promoted")  # fmt: skip
    report("healthy vLLM canary: calls failed over the release",
           f"{len(failed)} of {len(results)}", "0", not failed)  # fmt: skip
    report("healthy vLLM canary: s from start to promotion", f"{promoted:.0f}",
           f"~2 x {interval} + start", True)  # fmt: skip
    delete(system, name)


def split(system) -> None:
    name = "bench-canary-split"
    token = deploy(system, engine(name, "1", 0.0, CHUNKS="1"))
    release(system, name, engine(name, "2", 0.0, CHUNKS="1"), steps=[10, 100],
            interval_s=86400, min_requests=1_000_000)  # fmt: skip
    wait_until(lambda: _running(system, name), 300, "the canary running", 0.5)
    body = {"model": name, "prompt": "hi", "max_tokens": 1}
    headers = {"Authorization": f"Bearer {token}"}

    def one(_: int) -> str:
        with httpx.Client(timeout=30) as client:
            answer = client.post(system.stack.gateway_url + "/v1/completions", json=body,
                                 headers=headers)  # fmt: skip
        return answer.headers.get("x-engine-version", "?")

    with ThreadPoolExecutor(8) as pool:
        versions = Counter(pool.map(one, range(2000)))
    share = versions["2"] / 2000
    report("split over 2,000 calls: canary's share at 10 %", f"{share:.2%}", "10 ± 2 %",
           abs(share - 0.10) <= 0.02)  # fmt: skip
    with system.api() as api:
        api.post(f"/services/{name}/canary/abort")
    delete(system, name)


def _running(system, name: str) -> bool:
    with system.api() as api:
        return api.get(f"/services/{name}/canary").json()["state"] == "running"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=int, default=20, help="seconds each step is judged")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="wharf-bench-canary-"))
    write_tiny_model(home / "models" / "tiny-llama")
    system = start_own_system(home, REDIS_URL, REDIS_DB, "wharf_bench_canary")
    try:
        print("a. bad canaries beside a healthy stable version (slow engine, 0.05 s a token)")
        bad_canary(system, "bench-canary-slow", engine("bench-canary-slow", "2", 0.15),
                   args.interval, 25, "3x slower canary")  # fmt: skip
        bad_canary(system, "bench-canary-fail", engine("bench-canary-fail", "2", 0.05,
                   FAIL_EVERY="5"), args.interval, 25, "canary failing 20 %")  # fmt: skip
        print("b. a healthy canary of the tiny vLLM CPU service")
        healthy_vllm(system, args.interval)
        print("c. the weighted split")
        split(system)
    finally:
        system.remove_instances()
        system.stack.stop()
    missed = [row for row in ROWS if not row[3]]
    print(f"\n{len(ROWS) - len(missed)} of {len(ROWS)} figures on target")


if __name__ == "__main__":
    main()
