"""What an engine's front costs (gateway/front.py): latency straight to an engine vs through
its front, at fixed rates, in one run.

Starts the fast upstream (benchmarks/upstream.py, which answers at once, so the front's own
cost is what shows) and a front before it with an engine key, then sends the same open-loop
load (benchmarks/loadgen.py) to both, in alternating slices, and prints p50/p99 of each, what
the front adds and the front's CPU share of one core. `--stream` asks for SSE answers (one
event per token), as the gateway relays most LLM calls. Load, front and engine share this
machine's cores, so the figures are an upper bound.

Run: .venv/bin/python benchmarks/engine_front.py [--rates 200,1000,2000] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import harness
from loadgen import Pool, Result, build_request, open_loop, summarize

from contracts.engine_front import KEY_ENV

KEY = "wek-" + "0" * 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="200,1000,2000", help="comma-separated req/s")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--slices", type=int, default=5, help="alternations per rate")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per answer")
    parser.add_argument("--stream", action="store_true", help="SSE answers, one event a token")
    args = parser.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",")]
    return args


def start_front(procs: harness.Processes, engine: str) -> str:
    port = harness.free_port()
    upstream = engine.removeprefix("http://")
    argv = [sys.executable, "-m", "gateway.front", "--listen", f"127.0.0.1:{port}",
            "--upstream", upstream]  # fmt: skip
    procs.start("front", argv, env={KEY_ENV: KEY})
    url = f"http://127.0.0.1:{port}"
    harness.wait_http(url + "/health", procs, timeout=10, accept=(401,))  # up, and closed
    return url


async def run(args: argparse.Namespace, engine: str, front: str, procs) -> None:
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": args.max_tokens,
                       "stream": args.stream, "wharf_event_delay": 0}).encode()  # fmt: skip
    headers = {"Authorization": f"Bearer {KEY}"}
    pools = {False: Pool(engine + "/v1/completions"), True: Pool(front + "/v1/completions")}
    print(f"machine: {harness.machine()}")
    kind = "streamed, one event a token" if args.stream else "one JSON answer"
    print(f"{args.max_tokens} tokens, {kind}; {args.duration:g} s a rate each way in "
          f"{args.slices} alternating slices (latency in ms, open loop)")  # fmt: skip
    print("  rate |   direct p50      p99 |    front p50      p99 |  added p50      p99 | "
          "errors  front cpu")  # fmt: skip
    for rate in args.rates:
        runs: dict[bool, list[Result]] = {False: [], True: []}
        cpu, front_wall = procs.cpu_seconds("front"), 0.0
        for _ in range(args.slices):
            for through in (False, True):
                started = time.monotonic()
                runs[through] += await open_loop(
                    [pools[through]],
                    lambda i, through=through: build_request(
                        (front if through else engine) + "/v1/completions", body, headers
                    ),
                    rate=rate, duration=args.duration / args.slices, stream=args.stream,
                )  # fmt: skip
                if through:
                    front_wall += time.monotonic() - started
        share = (procs.cpu_seconds("front") - cpu) / front_wall if front_wall else float("nan")
        direct, fronted = (
            summarize(runs[False], args.duration),
            summarize(runs[True], args.duration),
        )
        print(f"{rate:6.0f} | {direct.p50_ms:12.2f} {direct.p99_ms:8.2f} | "
              f"{fronted.p50_ms:12.2f} {fronted.p99_ms:8.2f} | "
              f"{fronted.p50_ms - direct.p50_ms:+10.2f} {fronted.p99_ms - direct.p99_ms:+8.2f} | "
              f"{fronted.error_rate:6.2%} {share:9.0%}", flush=True)  # fmt: skip
    for pool in pools.values():
        pool.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    harness.raise_on_sigterm()
    with harness.Processes() as procs:
        engine = harness.start_upstream(procs, event_delay=0)
        front = start_front(procs, engine)
        asyncio.run(run(args, engine, front, procs))


if __name__ == "__main__":
    main()
