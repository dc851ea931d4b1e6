"""Gateway streaming: does every SSE event reach the client as soon as the engine sends it?

Starts the fast upstream (benchmarks/upstream.py), a routing snapshot and ``python -m
gateway``, then keeps 64 streamed completions running at once (open loop: a new stream
starts as often as one ends, for ``--rounds`` stream lifetimes), straight to the upstream
and through the gateway with an API key. ``--burst`` instead starts all 64 within one
inter-event delay, round after round: the harder case, where admitting the newcomers
competes with relaying the others' events. The upstream stamps each event with the time it
wrote it (``time.monotonic``, system-wide); the client stamps its arrival. For every event,
``gap = arrival - sent``: the direct gaps are the baseline (client and upstream scheduling),
the gateway's minus those is what it adds.

An event is "held back" when its gap exceeds ``--max-gap-ms`` (default 50 ms, 2.5 event
delays). Checked for every event, not on average: a proxy that buffers, or flushes on a
timer, fails here even when its mean looks fine. Events later than one event delay are
counted too, and grouped by the moment they were sent: many streams late at the same moment
is a stall of the whole process or machine (on a shared machine, being descheduled), where
buffering would make streams late each on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time

import harness
from loadgen import Pool, Result, build_request, open_loop, percentile


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams")
    parser.add_argument("--events", type=int, default=32, help="token events per stream")
    parser.add_argument("--event-delay", type=float, default=0.02, help="seconds between events")
    parser.add_argument("--rounds", type=int, default=5, help="stream lifetimes measured")
    parser.add_argument("--burst", action="store_true", help="start each round's streams at once")
    parser.add_argument(
        "--auth",
        choices=("key", "service"),
        default="key",
        help="call with an API key (limits on) or the service token",
    )
    parser.add_argument(
        "--max-gap-ms",
        type=float,
        default=50.0,
        help="an event later than this is held back (default 50: 2.5 event delays)",
    )
    parser.add_argument(
        "--redis-url",
        default=harness.DEFAULT_REDIS_URL,
        help="a Redis database of the benchmark's own: it is flushed",
    )
    args = parser.parse_args(argv)
    if not (0 < args.streams <= 512 and 0 < args.events <= 1000 and 0 < args.rounds <= 50):
        parser.error("--streams <= 512, --events <= 1000, --rounds <= 50")
    if args.events * args.event_delay * args.rounds > 120:
        parser.error("events x event-delay x rounds must stay under 120 s")
    return args


class Streams:
    """What one target (direct or gateway) delivered: gaps per event and the failures."""

    def __init__(self, spacing: float) -> None:
        self.spacing = spacing  # seconds between token events
        self.gaps_ms: list[float] = []  # arrival - sent, every stamped event
        self.first_ms: list[float] = []  # first event's arrival - the stream's scheduled start
        self.coalesced = 0  # events that arrived only after the next one was sent
        self.failures: list[str] = []
        self.late: list[tuple[float, int]] = []  # (sent, stream) of events over one spacing
        self._streams = 0

    def add(self, result: Result, expected_events: int) -> None:
        self._streams += 1
        if not result.ok:
            self.failures.append(f"{result.status} {result.error or ''} {result.body[:200]!r}")
            return
        stamped: list[tuple[float, float]] = []
        done = False
        for arrived, raw in result.events:
            data = raw.removeprefix(b"data: ").strip()
            if data == b"[DONE]":
                done = True
                continue
            try:
                sent = json.loads(data)["wharf_sent"]
            except (ValueError, KeyError, TypeError):
                continue  # an event the gateway added (e.g. a comment): nothing to time
            stamped.append((arrived, sent))
        tokens = len(stamped) - 1  # the last stamped event carries the usage
        if tokens != expected_events or not done:
            self.failures.append(f"got {tokens} token events of {expected_events}, done={done}")
        for arrived, sent in stamped:
            self.gaps_ms.append((arrived - sent) * 1000)
            if arrived - sent > self.spacing:
                self.late.append((sent, self._streams))
        if stamped:
            self.first_ms.append((stamped[0][0] - result.scheduled) * 1000)
        # Token events are spaced by the delay (the usage event follows the last at once).
        for (arrived, sent), (_, next_sent) in zip(stamped, stamped[1:], strict=False):
            if next_sent - sent >= self.spacing / 2 and arrived > next_sent:
                self.coalesced += 1

    def over(self, max_gap_ms: float) -> int:
        return sum(1 for gap in self.gaps_ms if gap > max_gap_ms)

    def late_moments(self) -> str:
        """Late events grouped by when they were sent (5 ms apart or less: one moment).

        Many streams late at one moment means the process (or the machine) stalled then,
        for everyone; a proxy that buffers makes each stream late on its own, all along.
        """
        if not self.late:
            return ""
        moments: list[set[int]] = []
        previous = -1.0
        for sent, stream in sorted(self.late):
            if sent - previous > 0.005:
                moments.append(set())
            moments[-1].add(stream)
            previous = sent
        widest = max(len(m) for m in moments)
        return f"in {len(moments)} moments, up to {widest} streams late at once"


async def run_target(args: argparse.Namespace, url: str, token: str) -> Streams:
    body = json.dumps(
        {
            "model": "tiny",
            "prompt": "hello world",
            "max_tokens": args.events,
            "stream": True,
            "stream_options": {"include_usage": True},
            "wharf_event_delay": args.event_delay,
        }
    ).encode()
    raw = build_request(url, body, {"Authorization": f"Bearer {token}"})
    pool = Pool(url)
    streams = Streams(args.event_delay)
    lifetime = args.events * args.event_delay
    timeout = lifetime + 10

    async def run(rate: float, duration: float) -> list[Result]:
        results = await open_loop(
            [pool], lambda i: raw, rate=rate, duration=duration, timeout=timeout, stream=True
        )
        await asyncio.sleep(0.2)
        return results

    try:
        if args.burst:
            # All of a round's streams start within one event delay; round 0 opens connections.
            for round_ in range(args.rounds + 1):
                results = await run(args.streams / args.event_delay, args.event_delay)
                if round_:
                    for result in results:
                        streams.add(result, args.events)
        else:
            # Little's law: starting streams/lifetime a second keeps `streams` running.
            rate = args.streams / lifetime
            await run(rate, lifetime)  # warm-up: opens the connections
            for result in await run(rate, args.rounds * lifetime):
                streams.add(result, args.events)
    finally:
        pool.close()
    return streams


def row(name: str, values: list[float]) -> str:
    p = [percentile(values, q) for q in (50, 90, 99)]
    return f"{name:22} {p[0]:9.2f} {p[1]:9.2f} {p[2]:9.2f} {max(values, default=math.nan):9.2f}"


async def benchmark(
    args: argparse.Namespace, procs: harness.Processes, upstream: str, gateway: str, token: str
) -> bool:
    print(f"machine: {harness.machine()}")
    direct = await run_target(args, upstream + "/v1/completions", token)
    cpu, wall = procs.cpu_seconds("gateway"), time.monotonic()
    through = await run_target(args, gateway + "/v1/completions", token)
    cpu_share = (procs.cpu_seconds("gateway") - cpu) / (time.monotonic() - wall)
    total = args.rounds * args.streams
    how = "started at once, round after round" if args.burst else "running at any time"
    print(
        f"\n{args.streams} concurrent streams ({how}) x {args.events} events "
        f"{args.event_delay * 1000:g} ms apart: {total} streams, {len(through.gaps_ms)} events "
        f"through the gateway (gateway CPU {cpu_share:.0%} of a core, warm-up included)"
    )
    print(f"{'ms':22} {'p50':>9} {'p90':>9} {'p99':>9} {'max':>9}")
    print(row("event gap, direct", direct.gaps_ms))
    print(row("event gap, gateway", through.gaps_ms))
    added = [percentile(through.gaps_ms, q) - percentile(direct.gaps_ms, q) for q in (50, 99)]
    print(f"{'added per event':22} {added[0]:9.2f} {'':9} {added[1]:9.2f}")
    print(row("first event, direct", direct.first_ms))
    print(row("first event, gateway", through.first_ms))
    ok = True
    spacing_ms = args.event_delay * 1000
    for name, streams in (("direct", direct), ("gateway", through)):
        over = streams.over(args.max_gap_ms)
        print(
            f"{name}: {over} events over {args.max_gap_ms:g} ms; {len(streams.late)} over "
            f"{spacing_ms:g} ms (one event delay) {streams.late_moments()}; "
            f"{streams.coalesced} arrived after the next was sent; "
            f"{len(streams.failures)} failed streams"
        )
        for failure in streams.failures[:5]:
            print(f"  {failure}")
        if name == "gateway":
            ok = over == 0 and not streams.failures
    print(f"no event held back (every gap <= {args.max_gap_ms:g} ms): {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    harness.raise_on_sigterm()
    harness.reset_redis(args.redis_url)
    with harness.Processes() as procs:
        upstream = harness.start_upstream(procs, event_delay=args.event_delay)
        snapshot, api_key, service_token = harness.bench_snapshot([upstream])
        harness.publish(args.redis_url, snapshot)
        gateway = harness.start_gateway(procs, args.redis_url)
        harness.wait_snapshot(gateway, snapshot.version)
        try:
            token = api_key if args.auth == "key" else service_token
            ok = asyncio.run(benchmark(args, procs, upstream, gateway, token))
        except BaseException:
            print("--- gateway log (tail) ---\n" + procs.log("gateway"))
            raise
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
