"""Tracing's cost: the gateway's overhead per request with traces off and on, side by side.

Starts the fast upstream (benchmarks/upstream.py), an OTLP/HTTP receiver
(benchmarks/otlp_sink.py), and gateways on one routing snapshot: one without an endpoint
(traces off, the default) and one with WHARF_OTLP_ENDPOINT set (every call traced:
the call's span, routing, admission and engine spans, exported in batches). For each rate the
same open-loop load (benchmarks/loadgen.py) goes straight to the engine and through each
gateway, in alternating slices, and the table prints each one's p50/p99, what each gateway
adds to the direct latency, and each gateway's CPU time per request (the clearest figure of
the work tracing adds, as latency on a shared machine moves more than it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
import urllib.request

import harness
from loadgen import Pool, Result, build_request, open_loop, summarize

TARGETS = ("direct", "off", "on", "sampled")
LABELS = {
    "direct": "direct",
    "off": "tracing off",
    "on": "tracing on",
    "sampled": "on, 10% sampled",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="100,300", help="comma-separated req/s")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rate and target")
    parser.add_argument("--slices", type=int, default=5, help="alternations per rate")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per answer")
    parser.add_argument(
        "--redis-url",
        default=harness.DEFAULT_REDIS_URL,
        help="a Redis database of the benchmark's own: it is flushed",
    )
    args = parser.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",")]
    if not 1 <= args.slices <= 20 or not 0 < args.duration <= 60:
        parser.error("--slices must be in 1..20 and --duration in (0, 60]")
    return args


class Bench:
    def __init__(self, args: argparse.Namespace, procs: harness.Processes, urls: dict[str, str],
                 token: str) -> None:  # fmt: skip
        self.args, self.procs = args, procs
        self.urls = {name: url + "/v1/completions" for name, url in urls.items()}
        self.pools = {name: Pool(url) for name, url in self.urls.items()}
        self.headers = {"Authorization": f"Bearer {token}"}
        self.cpu = {name: 0.0 for name in TARGETS}
        self.requests = {name: 0 for name in TARGETS}

    def body(self) -> bytes:
        payload = {"model": "tiny", "prompt": "hello world", "max_tokens": self.args.max_tokens}
        return json.dumps(payload).encode()

    async def run(self, target: str, rate: float, duration: float) -> list[Result]:
        process = f"gateway-{target}"
        before = self.procs.cpu_seconds(process) if target != "direct" else 0.0
        results = await open_loop(
            [self.pools[target]],
            lambda i: build_request(self.urls[target], self.body(), self.headers),
            rate=rate, duration=duration, timeout=5.0,
        )  # fmt: skip
        await asyncio.sleep(0.3)  # the gateway's bookkeeping after the last answer
        if target != "direct":
            self.cpu[target] += self.procs.cpu_seconds(process) - before
            self.requests[target] += len(results)
        return results

    def cpu_per_request_us(self, target: str) -> float:
        cpu, count = self.cpu[target], self.requests[target]
        self.cpu[target], self.requests[target] = 0.0, 0
        return cpu / count * 1e6 if count else math.nan

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()


async def benchmark(bench: Bench) -> None:
    try:
        await _measure(bench)
    finally:
        bench.close()  # in the loop its connections belong to


async def _measure(bench: Bench) -> None:
    args = bench.args
    for target in TARGETS:  # warm connections and code paths
        results = await bench.run(target, rate=20, duration=1)
        if not all(r.ok for r in results):
            raise RuntimeError(f"{target}: warm-up calls failed: {results[0]}")
        if target != "direct":
            bench.cpu_per_request_us(target)  # counted from here
    print(
        f"\n{args.duration:g} s per target and rate in {args.slices} alternating slices "
        "(latency in ms, open loop; the gateway's CPU time per request in microseconds)"
    )
    print("  rate  target             p50      p99  added p50  cpu/req  errors")  # fmt: skip
    for rate in args.rates:
        runs: dict[str, list[Result]] = {name: [] for name in TARGETS}
        for _ in range(args.slices):
            for target in TARGETS:
                runs[target] += await bench.run(target, rate, args.duration / args.slices)
        direct = summarize(runs["direct"], args.duration)
        for target in TARGETS:
            s = summarize(runs[target], args.duration)
            added = f"{s.p50_ms - direct.p50_ms:+9.2f}" if target != "direct" else " " * 9
            cpu = f"{bench.cpu_per_request_us(target):7.0f}" if target != "direct" else " " * 7
            print(f"{rate:6.0f}  {LABELS[target]:15} {s.p50_ms:7.2f} {s.p99_ms:8.2f}  {added}  "
                  f"{cpu}  {s.error_rate:6.2%}", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    harness.raise_on_sigterm()
    harness.reset_redis(args.redis_url)
    with harness.Processes() as procs:
        engine = harness.start_upstream(procs)
        port = harness.free_port()
        procs.start("otlp-sink", [sys.executable, "benchmarks/otlp_sink.py", str(port)])
        sink = f"http://127.0.0.1:{port}"
        harness.wait_http(sink + "/count", procs, 30)
        snapshot, api_key, _ = harness.bench_snapshot([engine])
        harness.publish(args.redis_url, snapshot)
        urls = {"direct": engine}
        urls["off"] = harness.start_gateway(procs, args.redis_url, "gateway-off")
        urls["on"] = harness.start_gateway(
            procs, args.redis_url, "gateway-on", env={"WHARF_OTLP_ENDPOINT": sink}
        )
        urls["sampled"] = harness.start_gateway(
            procs, args.redis_url, "gateway-sampled", env={
                "WHARF_OTLP_ENDPOINT": sink, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "0.1",
            },
        )  # fmt: skip
        for name in ("off", "on", "sampled"):
            harness.wait_snapshot(urls[name], snapshot.version)
        print(f"machine: {harness.machine()}")
        print("engine: benchmarks/upstream.py; auth: API key with rpm/tpm/concurrency limits")
        bench = Bench(args, procs, urls, api_key)
        try:
            asyncio.run(benchmark(bench))
            time.sleep(6)  # the exporter's batch delay (5 s): the last spans arrive
            with urllib.request.urlopen(sink + "/count", timeout=5) as answer:
                print(f"spans received by the OTLP sink: {int(answer.read())}")
        except BaseException:
            print("--- gateway-on log (tail) ---\n" + procs.log("gateway-on"))
            raise


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
