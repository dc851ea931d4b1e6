"""Online latency with a batch running, against the same online load alone (issue 29).

The whole system as `make run` starts it (`manage.py up`, its API, workers and gateway), on the
process runtime, with one service of vLLM CPU instances serving the tiny model. Three phases:

1. online alone: streamed completions at a fixed rate (open loop), time to first token p50/p99;
2. the same online load while a batch (OpenAI's Batch API, through the `openai` SDK) of
   `--lines` requests runs on the same instances; then the batch's completion time and
   throughput once it is done;
3. a second batch, and one instance's engine killed (SIGKILL to its process group) when a tenth
   of it is done: every line must still be answered once (items in flight are delivered again).

Target (issue 29): online TTFT p50 and p99 with the batch within 10 % of the same load alone,
since queued work only takes the slots online callers leave.

Beside each online window's figures, the cores each part of the system used meanwhile (every
process on the machine, by its command): whether the queue's own work (the API, the gateway's
feeder) or the engine is what an online call meets.

    .venv/bin/python benchmarks/batch_vs_online.py [--lines 2000] [--rate 2] [--seconds 60]

On a 2-core machine the instances, the control plane, the gateway and this client share the
cores, so the figures say more about that contention than about the queue; run it on a machine
with cores to spare.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import harness
import httpx
import openai
import psutil
from loadgen import percentile

PROMPT = "The harbour master counted the ships at the quay and"
UP_STOP_S = 120  # what `manage.py up` may take to stop its instances and itself


def start_stack(procs: harness.Processes, home: Path, token: str) -> tuple[str, str]:
    """`manage.py up --no-demo` in a fresh home: (API URL, gateway URL)."""
    api_port, gateway_port = harness.free_port(), harness.free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("WHARF_")}
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update(WHARF_HOME=str(home), WHARF_RUNTIME="process", WHARF_BOOTSTRAP_TOKEN=token)
    procs.start("up", [sys.executable, str(harness.REPO / "manage.py"), "up", "--no-demo",
                       "--api-port", str(api_port), "--gateway-port", str(gateway_port)],
                env=env)  # fmt: skip
    api, gateway = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{gateway_port}"
    harness.wait_http(api + "/readyz", procs, 900)
    harness.wait_http(gateway + "/healthz", procs, 120)
    return api, gateway


def deploy(api: httpx.Client, replicas: int, cpus: int, procs: harness.Processes) -> str:
    """The tiny model on `replicas` instances of `cpus` cores, running: a key for the gateway."""
    spec = json.loads((harness.REPO / "deploy_specs" / "demo-tiny-vllm.json").read_text())
    spec["name"] = "bench"
    spec["metadata"].update(instance=replicas, cpu=cpus)
    created = api.post("/services", json=spec)
    created.raise_for_status()
    deadline = time.monotonic() + 900
    while api.get("/services/bench").json()["phase"] != "running":
        procs.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError("the service did not run within 15 min")
        time.sleep(2)
    key = api.post("/keys", json={"name": "bench"})
    key.raise_for_status()
    return key.json()["key"]


async def one_call(session: aiohttp.ClientSession, url: str, key: str, tokens: int) -> float:
    """Time to the first streamed token of one completion, in seconds."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": tokens, "stream": True,
            "ignore_eos": True, "temperature": 0}  # fmt: skip
    started = time.perf_counter()
    first = None
    async with session.post(url + "/v1/completions", json=body,
                            headers={"Authorization": f"Bearer {key}"}) as answer:  # fmt: skip
        answer.raise_for_status()
        async for line in answer.content:
            if first is None and line.startswith(b"data: {") and json.loads(line[6:])["choices"]:
                first = time.perf_counter()
    if first is None:
        raise RuntimeError("a streamed completion with no token")
    return first - started


async def online(url: str, key: str, rate: float, seconds: float, tokens: int) -> list[float]:
    """Open loop: call i is sent at i / rate seconds whether or not earlier ones are done."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        began = time.perf_counter()
        calls = []
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, began + i / rate - time.perf_counter()))
            calls.append(asyncio.ensure_future(one_call(session, url, key, tokens)))
        return list(await asyncio.gather(*calls))


# Whose cores the online windows used: every process on the machine, by what its command names
# (case aside: vLLM's engine core calls itself VLLM::EngineCore).
ROLES = (("engine", "vllm"), ("api", "controlplane"), ("gateway", "gateway"),
         ("workers", "celery"), ("workers", " worker"), ("redis", "redis-server"),
         ("benchmark", "batch_vs_online"))  # fmt: skip


def cpu_by_role() -> dict[str, float]:
    """CPU seconds (user + system) every live process has used so far, summed by role."""
    used: dict[str, float] = {}
    for proc in psutil.process_iter(["cmdline", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is None:
            continue
        line = " ".join(proc.info["cmdline"] or []).lower()
        role = next((name for name, part in ROLES if part in line), "other")
        used[role] = used.get(role, 0.0) + times.user + times.system
    return used


def timed_online(*load) -> tuple[list[float], dict[str, float]]:  # noqa: ANN002
    """The online load's TTFTs and the cores each role used meanwhile."""
    before, began = cpu_by_role(), time.monotonic()
    ttfts = asyncio.run(online(*load))
    after, took = cpu_by_role(), time.monotonic() - began
    # A process that ended meanwhile takes its time with it: never below nothing.
    return ttfts, {role: max(0.0, after[role] - before.get(role, 0.0)) / took for role in after}


def batch_file(lines: int, tokens: int) -> bytes:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True}
    return b"".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                                "body": body}).encode() + b"\n"
                    for i in range(lines))  # fmt: skip


def start_batch(client: openai.OpenAI, lines: int, tokens: int) -> str:
    upload = client.files.create(file=("bench.jsonl", io.BytesIO(batch_file(lines, tokens))),
                                 purpose="batch")  # fmt: skip
    return client.batches.create(input_file_id=upload.id, endpoint="/v1/completions",
                                 completion_window="24h").id  # fmt: skip


def wait_batch(client: openai.OpenAI, batch_id: str, until, timeout: float = 7200):  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if until(batch):
            return batch
        if batch.status in ("failed", "expired", "cancelled") or time.monotonic() > deadline:
            raise RuntimeError(f"batch {batch_id}: {batch.status}, {batch.request_counts}")
        time.sleep(0.5)


def done(batch) -> bool:  # noqa: ANN001
    return batch.status == "completed"


def answered_once(client: openai.OpenAI, batch, lines: int) -> tuple[int, int]:  # noqa: ANN001
    """(distinct custom ids answered 200, lines in the output file)."""
    text = client.files.content(batch.output_file_id).text if batch.output_file_id else ""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    ok = {row["custom_id"] for row in rows if row["response"]["status_code"] == 200}
    return len(ok), len(rows)


def kill_an_engine(home: Path, api: httpx.Client) -> str:
    """SIGKILL to the process group of the service's first ready instance's engine."""
    ready = [i for i in api.get("/services/bench/instances").json() if i["state"] == "ready"]
    name = ready[0]["name"]
    state = next(home.rglob(f"{name}.json"))
    os.killpg(json.loads(state.read_text())["pid"], signal.SIGKILL)
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=2000, help="requests in the batch")
    parser.add_argument("--rate", type=float, default=2.0, help="online calls per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="online load per phase")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per completion")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=1, help="cores per instance")
    args = parser.parse_args()
    harness.raise_on_sigterm()
    token = "wharf_bench_" + secrets.token_hex(16)
    with (
        tempfile.TemporaryDirectory(prefix="wharf-batch-bench-") as tmp,
        harness.Processes() as procs,
    ):
        home = Path(tmp)
        try:
            api_url, gateway = start_stack(procs, home, token)
            api = httpx.Client(base_url=api_url + "/api/v1", timeout=60, trust_env=False,
                               headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            key = deploy(api, args.replicas, args.cpus, procs)
            client = openai.OpenAI(base_url=gateway + "/v1", api_key=key, max_retries=2)
            load = (gateway, key, args.rate, args.seconds, args.tokens)
            asyncio.run(online(gateway, key, 1.0, 5.0, args.tokens))  # warm up
            alone, cores_alone = timed_online(*load)

            batch_id = start_batch(client, args.lines, args.tokens)
            started = time.monotonic()
            wait_batch(
                client, batch_id, lambda b: b.request_counts and b.request_counts.completed > 0
            )
            beside, cores_beside = timed_online(*load)
            during = client.batches.retrieve(batch_id)
            batch = wait_batch(client, batch_id, done)
            took = time.monotonic() - started
            answered, rows = answered_once(client, batch, args.lines)

            kill_lines = max(args.lines // 4, 20)
            killed_id = start_batch(client, kill_lines, args.tokens)
            wait_batch(client, killed_id, lambda b: b.request_counts
                       and b.request_counts.completed >= kill_lines // 10)  # fmt: skip
            victim = kill_an_engine(home, api)
            killed = wait_batch(client, killed_id, done)
            killed_answered, killed_rows = answered_once(client, killed, kill_lines)
        finally:
            # `manage.py up` drains and removes its instances on SIGTERM before it exits: the
            # engines run in sessions of their own, so a SIGKILL to its group would leave them.
            procs.stop_all(grace=UP_STOP_S)

    print(f"machine: {harness.machine()}")
    print(f"online: {args.rate:g} calls/s for {args.seconds:g} s, {args.tokens} tokens each, "
          f"streamed; {args.replicas} vLLM CPU instances of the tiny model")  # fmt: skip
    print(f"{'TTFT (ms)':<12} {'alone':>8} {'with batch':>11} {'ratio':>6}  target")
    for name, q in (("p50", 50), ("p99", 99)):
        a, b = percentile(alone, q) * 1000, percentile(beside, q) * 1000
        verdict = "met" if b <= a * 1.10 else "NOT met"
        print(f"{name:<12} {a:>8.1f} {b:>11.1f} {b / a:>6.2f}  <= 1.10 ({verdict})")
    print(f"mean TTFT alone {statistics.mean(alone) * 1000:.1f} ms, with batch "
          f"{statistics.mean(beside) * 1000:.1f} ms")  # fmt: skip
    print("cores used in the online window, by role: alone / with batch")
    for role in sorted(set(cores_alone) | set(cores_beside)):
        alone_used, beside_used = cores_alone.get(role, 0.0), cores_beside.get(role, 0.0)
        print(f"  {role:<10} {alone_used:5.2f} / {beside_used:5.2f}")
    still = during.status == "in_progress"
    print(f"batch still running when the online window closed: {still} "
          f"({during.request_counts.completed if during.request_counts else 0}/{args.lines} "
          "done then)")  # fmt: skip
    print(f"batch of {args.lines}: {took:.1f} s, {args.lines / took:.1f} lines/s, "
          f"{args.lines * args.tokens / took:.0f} tokens/s; answered once: {answered}/{args.lines} "
          f"in {rows} output lines, failed {batch.request_counts.failed}")  # fmt: skip
    print(f"batch of {kill_lines} with engine {victim} killed: answered once "
          f"{killed_answered}/{kill_lines} in {killed_rows} output lines, failed "
          f"{killed.request_counts.failed}")  # fmt: skip


if __name__ == "__main__":
    main()
