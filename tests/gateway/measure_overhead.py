"""Quick measure of the gateway's added latency (not a test; the formal ones are benchmarks/).

    .venv/bin/python tests/gateway/measure_overhead.py [--rate 500] [--seconds 10]

Starts a minimal engine (a fixed completion with usage) and a gateway in their own
processes, both on uvicorn with uvloop and httptools, with an API key whose rpm, tpm and
concurrency limits apply, and a service rate limit and queue bound (all set high enough
never to refuse; `--no-limits`: none), then sends the same open-loop load at `--rate`
requests/s straight to the engine and through the gateway, and prints p50/p99 of each,
their difference, and the gateway's CPU time a request. Needs a Redis
(WHARF_TEST_REDIS_URL, else 127.0.0.1:6379/15).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

_ANSWER = json.dumps(
    {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": "tiny",
        "choices": [{"index": 0, "text": "hello", "finish_reason": "length", "logprobs": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()


async def engine_app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": _ANSWER})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve_engine(port: int) -> None:
    import uvicorn

    uvicorn.run(
        engine_app, port=port, log_level="error", loop="uvloop", http="httptools", access_log=False
    )


def _serve_gateway(port: int, settings_json: str) -> None:
    import uvicorn

    from gateway.app import create_app
    from gateway.config import Settings

    fields = json.loads(settings_json)
    fields["secret_key"] = fields["secret_key"].encode()
    uvicorn.run(
        create_app(Settings(**fields)),
        port=port,
        log_level="error",
        loop="uvloop",
        http="httptools",
        access_log=False,
    )


async def _load(url: str, token: str, rate: float, seconds: float) -> list[float]:
    import aiohttp

    body = json.dumps({"model": "tiny", "prompt": "Say hello to the gateway", "max_tokens": 8})
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies: list[float] = []
    failures = 0
    connector = aiohttp.TCPConnector(limit=200)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            nonlocal failures
            start = time.perf_counter()
            async with session.post(url + "/v1/completions", data=body, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    failures += 1
                    return
            latencies.append(time.perf_counter() - start)

        for _ in range(50):  # warm the pools
            await one()
        latencies.clear()
        tasks = []
        begin = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    if failures:
        print(f"  {failures} requests failed")
    return latencies


def _summary(latencies: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(latencies, n=100)
    return q[49] * 1000, q[98] * 1000


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument(
        "--limits",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every limit on (the default), or auth alone",
    )
    args = parser.parse_args()

    import redis

    from contracts.routing import RoutedInstance, RoutedKey, RoutedService, Snapshot
    from contracts.tokens import API_KEY_PREFIX, new_token, token_digest

    redis_url = os.environ.get("WHARF_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    prefix = f"wharf:measure:{uuid.uuid4().hex}"
    secret = "measure-secret"
    token = new_token(API_KEY_PREFIX)
    engine_port, gateway_port = _free_port(), _free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    snapshot = Snapshot(
        version=1,
        services={
            "tiny": RoutedService(
                "tiny",
                served_model_names=("tiny",),
                instances=(RoutedInstance("e", engine_url),),
                rate_limit=1_000_000 if args.limits else 0,
                max_queue_size=100_000 if args.limits else None,
            )
        },
        keys={
            token_digest(secret.encode(), token): RoutedKey(
                "k1", rpm=10_000_000, tpm=1_000_000_000, max_concurrency=10_000
            )
            if args.limits
            else RoutedKey("k1")
        },
    )
    settings = {
        "redis_url": redis_url,
        "secret_key": secret,
        "snapshot_key": f"{prefix}:snapshot",
        "snapshot_channel": f"{prefix}:changed",
        "limits_prefix": f"{prefix}:limit:",
        "usage_prefix": f"{prefix}:usage:",
    }
    with redis.Redis.from_url(redis_url) as client:
        client.set(settings["snapshot_key"], snapshot.to_json())
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_serve_engine, args=(engine_port,), daemon=True),
        context.Process(
            target=_serve_gateway, args=(gateway_port, json.dumps(settings)), daemon=True
        ),
    ]
    for process in processes:
        process.start()
    try:
        _wait_for(engine_port)
        _wait_for(gateway_port)
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        direct = _summary(asyncio.run(_load(engine_url, token, args.rate, args.seconds)))
        before = _cpu_seconds(processes[1].pid)
        proxied = _summary(asyncio.run(_load(gateway_url, token, args.rate, args.seconds)))
        used = _cpu_seconds(processes[1].pid) - before
        print(f"gateway process: {used / (args.rate * args.seconds) * 1e6:.0f} us CPU a request")
        print(f"direct:  p50 {direct[0]:.2f} ms  p99 {direct[1]:.2f} ms")
        print(f"gateway: p50 {proxied[0]:.2f} ms  p99 {proxied[1]:.2f} ms")
        print(
            f"added:   p50 {proxied[0] - direct[0]:.2f} ms  p99 {proxied[1] - direct[1]:.2f} ms"
            f"  ({args.rate:g} req/s, auth"
            + (" + service rps + key rpm/tpm/concurrency + queue)" if args.limits else " only)")
        )
    finally:
        for process in processes:
            process.terminate()
            process.join(5)
        with redis.Redis.from_url(redis_url) as client:
            for key in client.scan_iter(f"{prefix}:*"):
                client.delete(key)


if __name__ == "__main__":
    main()
