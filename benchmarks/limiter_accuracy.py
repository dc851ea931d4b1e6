"""Limiter accuracy: 4 gateway processes sharing Redis, overloaded 2x, admit what is allowed?

Starts the fast upstream, 4 separate ``python -m gateway`` processes on one Redis database,
and offers twice a limit's worth of requests for 10 s, round robin over the 4 gateways
(open loop, benchmarks/loadgen.py). Two limits are measured, one at a time:

- ``service-rps``: the service's ``rate_limit`` L req/s, offered 2L req/s. The gateway keeps
  a sliding one-second log, so what a perfect limiter admits is computed by running that
  same rule over the requests' send times (about L x 10; the sliding rule admits a little
  less than that when admissions drift off the one-second grid).
- ``key-rpm``: an API key's ``rpm`` R, offered 2R requests over the 10 s. Its window is a
  minute, longer than the run, so a perfect limiter admits exactly R.

It prints allowed vs admitted (HTTP 200) and the error; the target is within 2%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

import harness
from loadgen import Pool, Result, build_request, open_loop

TARGET_ERROR = 0.02


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", choices=("service-rps", "key-rpm", "both"), default="both")
    parser.add_argument("--rps", type=int, default=100, help="service rate_limit (req/s)")
    parser.add_argument("--rpm", type=int, default=600, help="API key rpm")
    parser.add_argument("--overload", type=float, default=2.0, help="offered / allowed")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--gateways", type=int, default=4, help="gateway processes")
    parser.add_argument(
        "--redis-url",
        default=harness.DEFAULT_REDIS_URL,
        help="a Redis database of the benchmark's own: it is flushed",
    )
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 60 or not 1 <= args.gateways <= 8:
        parser.error("--duration must be in (0, 60] and --gateways in 1..8")
    if args.overload * max(args.rps, args.rpm / args.duration) > 5000:
        parser.error("offered load above 5000 req/s: lower --rps/--rpm or --overload")
    return args


def sliding_log_allows(times: Sequence[float], limit: int, window: float) -> int:
    """How many of the requests (send times, in order) a sliding-log limiter admits."""
    admitted: deque[float] = deque()
    count = 0
    for t in sorted(times):
        while admitted and admitted[0] <= t - window:
            admitted.popleft()
        if len(admitted) < limit:
            admitted.append(t)
            count += 1
    return count


@dataclass
class Measured:
    name: str
    offered: int
    allowed: int
    admitted: int
    refused: int
    other: Counter[str]
    per_gateway: list[int]

    @property
    def error(self) -> float:
        return (self.admitted - self.allowed) / self.allowed

    def row(self) -> str:
        other = sum(self.other.values())
        spread = "/".join(str(n) for n in self.per_gateway)
        return (
            f"{self.name:24} {self.offered:8} {self.allowed:8} {self.admitted:9} "
            f"{self.refused:8} {other:6} {self.error:+8.2%}   {spread}"
        )


class Setup:
    """The service, the keys and the gateways' pools; one snapshot version per limit."""

    def __init__(self, args: argparse.Namespace, upstream: str, gateways: list[str]) -> None:
        self.args = args
        self.upstream = upstream
        self.gateways = gateways
        self.version = 0

    def publish(self, rate_limit: int, rpm: int | None) -> str:
        """Publish the service with `rate_limit` and a fresh key with `rpm`; return the key."""
        self.version += 1
        base, _, _ = harness.bench_snapshot([self.upstream], rate_limit=rate_limit)
        token = harness.new_token(harness.API_TOKEN_PREFIX)
        key = harness.RoutedKey(id=f"bench-{self.version}", services=frozenset({"bench"}), rpm=rpm)
        digest = harness.token_digest(harness.SECRET_KEY.encode(), token)
        snapshot = harness.Snapshot(self.version, services=base.services, keys={digest: key})
        harness.publish(self.args.redis_url, snapshot)
        for url in self.gateways:
            harness.wait_snapshot(url, self.version)
        time.sleep(0.3)  # in case a gateway's /healthz does not report its version
        return token


async def offer(
    setup: Setup, token: str, rate: float, duration: float, pools: list[Pool]
) -> list[Result]:
    body = json.dumps({"model": "tiny", "prompt": "hello world", "max_tokens": 4}).encode()
    raws = [
        build_request(url + "/v1/completions", body, {"Authorization": f"Bearer {token}"})
        for url in setup.gateways
    ]
    return await open_loop(
        pools, lambda i: raws[i % len(raws)], rate=rate, duration=duration, timeout=10
    )


def tally(name: str, results: list[Result], allowed: int, gateways: int) -> Measured:
    per_gateway = [0] * gateways
    other: Counter[str] = Counter()
    admitted = refused = 0
    for i, result in enumerate(results):
        if result.ok:
            admitted += 1
            per_gateway[i % gateways] += 1
        elif result.status == 429:
            refused += 1
        else:
            other[result.error or str(result.status)] += 1
    return Measured(name, len(results), allowed, admitted, refused, other, per_gateway)


async def benchmark(args: argparse.Namespace, setup: Setup) -> bool:
    print(f"machine: {harness.machine()}")
    pools = [Pool(url + "/v1/completions") for url in setup.gateways]
    measured: list[Measured] = []
    try:
        # Warm every gateway's connections on an unlimited key, then let the service's
        # one-second log empty before counting starts.
        warm = setup.publish(harness.UNLIMITED, None)
        for result in await offer(setup, warm, rate=20 * len(pools), duration=1, pools=pools):
            if not result.ok:
                raise RuntimeError(
                    f"warm-up call refused: {result.status} {result.error or ''} "
                    f"{result.body[:500]!r}"
                )
        if args.limit in ("service-rps", "both"):
            token = setup.publish(args.rps, None)
            await asyncio.sleep(1.5)
            rate = args.rps * args.overload
            results = await offer(setup, token, rate, args.duration, pools)
            allowed = sliding_log_allows([r.sent for r in results], args.rps, 1.0)
            name = f"service rate_limit {args.rps}/s"
            measured.append(tally(name, results, allowed, len(pools)))
        if args.limit in ("key-rpm", "both"):
            token = setup.publish(harness.UNLIMITED, args.rpm)
            rate = args.rpm * args.overload / args.duration
            results = await offer(setup, token, rate, args.duration, pools)
            # The window (60 s) outlasts the run: exactly rpm requests may pass.
            allowed = min(args.rpm, len(results))
            measured.append(tally(f"key rpm {args.rpm}", results, allowed, len(pools)))
    finally:
        for pool in pools:
            pool.close()
    print(
        f"\n{args.gateways} gateway processes, one Redis; {args.overload:g}x the limit offered "
        f"for {args.duration:g} s, round robin (open loop)"
    )
    print(
        f"{'limit':24} {'offered':>8} {'allowed':>8} {'admitted':>9} {'refused':>8} "
        f"{'other':>6} {'error':>8}   admitted per gateway"
    )
    for m in measured:
        print(m.row())
        if m.other:
            print(f"  other outcomes: {dict(m.other)}")
    ok = all(abs(m.error) <= TARGET_ERROR and not m.other for m in measured)
    print(f"within {TARGET_ERROR:.0%} of allowed: {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    harness.raise_on_sigterm()
    harness.reset_redis(args.redis_url)
    with harness.Processes() as procs:
        upstream = harness.start_upstream(procs)
        gateways = [
            harness.start_gateway(procs, args.redis_url, name=f"gateway-{i}")
            for i in range(args.gateways)
        ]
        started = time.monotonic()
        try:
            ok = asyncio.run(benchmark(args, Setup(args, upstream, gateways)))
        except BaseException:
            print("--- gateway-0 log (tail) ---\n" + procs.log("gateway-0"))
            raise
        print(f"({time.monotonic() - started:.0f} s)")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
