"""Gateway overhead: latency direct to an engine vs through the gateway, at fixed rates.

Starts the fast upstream (benchmarks/upstream.py; or a real vLLM CPU engine with --vllm), a
routing snapshot in Redis and ``python -m gateway``, and calls the gateway with an API key
whose rpm/tpm/concurrency limits, like the service's rate_limit, are set far above the
offered load: every check runs, none rejects. For each rate it sends the same open-loop load
(benchmarks/loadgen.py) straight to the engine and through the gateway and prints p50/p99 of
both and what the gateway adds. Then it ramps each target to the highest rate it sustains
(error rate <= 1% and p99 <= 100 ms by default).

The load generator, the gateway and the engine share this machine's cores, so the figures
are an upper bound on the gateway's cost on a machine of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import harness
from loadgen import Pool, Result, Summary, build_request, open_loop, summarize


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates", help="comma-separated req/s (default 100,500,1000; with --vllm 5,10,20)"
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rate")
    parser.add_argument(
        "--slices",
        type=int,
        default=5,
        help="alternate direct and gateway this many times per rate, so that background "
        "load on a shared machine falls on both alike",
    )
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per answer (upstream)")
    parser.add_argument(
        "--auth",
        choices=("key", "service"),
        default="key",
        help="call with an API key (limits on) or the service token",
    )
    parser.add_argument("--no-ramp", action="store_true", help="skip the max-throughput ramp")
    parser.add_argument("--ramp-start", type=float, help="first ramp rate (default 500; vLLM 10)")
    parser.add_argument("--ramp-max", type=float, help="stop ramping here (default 8000; vLLM 160)")
    parser.add_argument("--ramp-step", type=float, default=5.0, help="seconds per ramp step")
    parser.add_argument(
        "--ramp-budget", type=float, help="seconds per ramp, each target (default 40; vLLM 30)"
    )
    parser.add_argument(
        "--max-p99-ms",
        type=float,
        help="p99 a sustained rate must stay under (default 100; vLLM 1000)",
    )
    parser.add_argument("--max-error", type=float, default=0.01, help="error rate allowed")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
    parser.add_argument("--vllm", action="store_true", help="a real vLLM CPU engine upstream")
    parser.add_argument(
        "--redis-url",
        default=harness.DEFAULT_REDIS_URL,
        help="a Redis database of the benchmark's own: it is flushed",
    )
    args = parser.parse_args(argv)
    default_rates = "5,10,20" if args.vllm else "100,500,1000"
    args.rates = [float(r) for r in (args.rates or default_rates).split(",")]
    args.ramp_start = args.ramp_start or (10.0 if args.vllm else 500.0)
    args.ramp_max = args.ramp_max or (160.0 if args.vllm else 8000.0)
    args.max_p99_ms = args.max_p99_ms or (1000.0 if args.vllm else 100.0)
    args.ramp_budget = args.ramp_budget or (30.0 if args.vllm else 40.0)
    if not 1 <= args.slices <= 20:
        parser.error("--slices must be in 1..20")
    if not 0 < args.duration <= 60 or not 0 < args.ramp_step <= 30 or args.ramp_budget > 300:
        parser.error("--duration must be in (0, 60], --ramp-step in (0, 30], --ramp-budget <= 300")
    return args


class Bench:
    """The two targets (engine direct, gateway) and the request bodies sent to both."""

    def __init__(
        self,
        args: argparse.Namespace,
        procs: harness.Processes,
        engine: str,
        gateway: str,
        token: str,
    ) -> None:
        self.args = args
        self.procs = procs
        self.gateway_cpu_s = 0.0  # gateway CPU seconds and wall seconds of its runs so far
        self.gateway_wall_s = 0.0
        self.direct_url = engine + "/v1/completions"
        self.gateway_url = gateway + "/v1/completions"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.direct = Pool(self.direct_url)
        self.gateway = Pool(self.gateway_url)

    def body(self, i: int) -> bytes:
        if self.args.vllm:
            # 1..8 tokens, exactly (ignore_eos), the same sequence for both targets.
            payload = {"max_tokens": 1 + i % 8, "ignore_eos": True, "temperature": 0}
        else:
            payload = {"max_tokens": self.args.max_tokens}
        return json.dumps({"model": "tiny", "prompt": "hello world", **payload}).encode()

    async def run(self, through_gateway: bool, rate: float, duration: float) -> list[Result]:
        pool = self.gateway if through_gateway else self.direct
        url = self.gateway_url if through_gateway else self.direct_url
        cpu, wall = self.procs.cpu_seconds("gateway"), time.monotonic()
        results = await open_loop(
            [pool],
            lambda i: build_request(url, self.body(i), self.headers),
            rate=rate,
            duration=duration,
            timeout=self.args.timeout,
        )
        await asyncio.sleep(0.5)  # let stragglers and the gateway's bookkeeping settle
        if through_gateway:
            self.gateway_cpu_s += self.procs.cpu_seconds("gateway") - cpu
            self.gateway_wall_s += time.monotonic() - wall
        return results

    def gateway_cpu(self) -> float:
        """The gateway's CPU use (share of one core) over its runs since the last call."""
        share = self.gateway_cpu_s / self.gateway_wall_s if self.gateway_wall_s else math.nan
        self.gateway_cpu_s = self.gateway_wall_s = 0.0
        return share

    def sustained(self, summary: Summary) -> bool:
        return summary.error_rate <= self.args.max_error and summary.p99_ms <= self.args.max_p99_ms

    def close(self) -> None:
        self.direct.close()
        self.gateway.close()


async def preflight(bench: Bench) -> None:
    """One call each way; a rejection here is a setup problem, reported with its body."""
    for through_gateway in (False, True):
        results = await bench.run(through_gateway, rate=1, duration=1)
        result = results[0]
        if not result.ok:
            where = "gateway" if through_gateway else "engine"
            raise RuntimeError(
                f"preflight call to the {where} failed: {result.status} {result.error or ''} "
                f"{result.body[:500]!r}"
            )


def added(direct: float, gateway: float) -> str:
    return f"{gateway - direct:+8.2f}"


async def fixed_rates(bench: Bench) -> None:
    args = bench.args
    print(
        f"\nfixed rates, {args.duration:g} s each way in {args.slices} alternating slices "
        "(latency in ms, open loop)"
    )
    print(
        "  rate |   direct p50      p99 |  gateway p50      p99 |  added p50      p99 | "
        "gw errors  gw cpu  lag p99"
    )
    for rate in args.rates:
        bench.gateway_cpu()
        runs: dict[bool, list[Result]] = {False: [], True: []}
        for _ in range(args.slices):
            for through_gateway in (False, True):
                slice_ = await bench.run(through_gateway, rate, args.duration / args.slices)
                runs[through_gateway] += slice_
        direct = summarize(runs[False], args.duration)
        gateway = summarize(runs[True], args.duration)
        print(
            f"{rate:6.0f} | {direct.p50_ms:12.2f} {direct.p99_ms:8.2f} | "
            f"{gateway.p50_ms:12.2f} {gateway.p99_ms:8.2f} | "
            f"{added(direct.p50_ms, gateway.p50_ms):>10} {added(direct.p99_ms, gateway.p99_ms)} | "
            f"{gateway.error_rate:9.2%} {bench.gateway_cpu():6.0%} {gateway.send_lag_p99_ms:8.2f}",
            flush=True,
        )
        for name, summary in (("direct", direct), ("gateway", gateway)):
            if summary.ok < summary.count:
                print(f"         {name}: {summary.line()}")


@dataclass
class Ramp:
    best: float | None = None  # highest rate sustained
    best_lag_ms: float = 0.0  # the generator's own send lag p99 at that rate
    failed: float | None = None  # lowest rate not sustained


async def ramp(bench: Bench, through_gateway: bool) -> Ramp:
    """Double the rate until it is not sustained (halve if the first is not), then refine
    between the highest sustained rate and the lowest failed one in quarter steps."""
    args = bench.args
    name = "gateway" if through_gateway else "direct"
    deadline = time.monotonic() + args.ramp_budget
    found = Ramp()

    async def step(rate: float) -> bool:
        bench.gateway_cpu()
        summary = summarize(await bench.run(through_gateway, rate, args.ramp_step))
        ok = bench.sustained(summary)
        cpu = f" gw cpu {bench.gateway_cpu():.0%}" if through_gateway else ""
        verdict = "ok  " if ok else "FAIL"
        print(f"  {name:7} {rate:7.0f}/s {verdict} {summary.line()}{cpu}", flush=True)
        if ok and (found.best is None or rate > found.best):
            found.best, found.best_lag_ms = rate, summary.send_lag_p99_ms
        if not ok:
            found.failed = rate if found.failed is None else min(found.failed, rate)
            await asyncio.sleep(2.0)  # drain the backlog before the next step
        return ok

    rate = args.ramp_start
    going_up = await step(rate)
    while time.monotonic() < deadline:
        rate = rate * 2 if going_up else rate / 2
        if rate > args.ramp_max or rate < args.ramp_start / 8:
            break
        if await step(rate) != going_up:
            break
    if found.best is not None and found.failed is not None:
        low, high = found.best, found.failed
        for fraction in (0.25, 0.5, 0.75):
            if time.monotonic() >= deadline or not await step(low + (high - low) * fraction):
                break
    return found


async def benchmark(
    args: argparse.Namespace, procs: harness.Processes, engine: str, gateway: str, token: str
) -> None:
    bench = Bench(args, procs, engine, gateway, token)
    try:
        await preflight(bench)
        for through_gateway in (False, True):  # warm connections and code paths
            await bench.run(through_gateway, rate=min(args.rates), duration=1)
        await fixed_rates(bench)
        if args.no_ramp:
            return
        print(
            f"\nmax sustained rate (error rate <= {args.max_error:.0%}, "
            f"p99 <= {args.max_p99_ms:g} ms; {args.ramp_step:g} s steps)"
        )
        direct_ramp = await ramp(bench, through_gateway=False)
        gateway_ramp = await ramp(bench, through_gateway=True)

        def show(found: Ramp) -> str:
            if found.best is None:
                return f"< {args.ramp_start / 8:g} req/s"
            capped = "+ (the ramp's top)" if found.failed is None else ""
            lag = f" (generator lag p99 {found.best_lag_ms:.0f} ms)"
            return f"{found.best:.0f}{capped} req/s{lag}"

        print(f"max sustained: direct {show(direct_ramp)}; gateway {show(gateway_ramp)}")
    finally:
        bench.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    harness.raise_on_sigterm()
    harness.reset_redis(args.redis_url)
    with harness.Processes() as procs, tempfile.TemporaryDirectory() as tmp:
        if args.vllm:
            print("starting vLLM CPU engine (about 40 s)...", flush=True)
            engine = harness.start_vllm(procs, harness.write_tiny_model(Path(tmp) / "tiny"))
        else:
            engine = harness.start_upstream(procs)
        snapshot, api_key, service_token = harness.bench_snapshot([engine])
        harness.publish(args.redis_url, snapshot)
        gateway = harness.start_gateway(procs, args.redis_url)
        harness.wait_snapshot(gateway, snapshot.version)
        token = api_key if args.auth == "key" else service_token
        print(f"machine: {harness.machine()}")
        print(
            f"engine: {'vLLM CPU (tiny model)' if args.vllm else 'benchmarks/upstream.py'}; "
            f"auth: {'API key with rpm/tpm/concurrency limits' if args.auth == 'key' else 'service token'}; "  # noqa: E501
            f"service rate_limit {snapshot.services['bench'].rate_limit} req/s (none rejects)"
        )
        try:
            asyncio.run(benchmark(args, procs, engine, gateway, token))
        except BaseException:
            print("--- gateway log (tail) ---\n" + procs.log("gateway"))
            raise


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
