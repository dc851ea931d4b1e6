"""The balancer: the state routing needs (requests in flight, turns, cool-downs, the prefix
table, the engines' figures), and the ranking of a service's instances by its policy
(gateway.routing.policies, pure); no I/O.

Counting in-flight requests per instance suits LLM engines: a request's cost varies by
orders of magnitude (a long generation vs a short one), so spreading by what is still
running beats plain round robin. Ties, including the idle case, rotate so that equal
instances share the load evenly.

An instance that refused a connection or stopped answering sits out a short cool-down, so
the requests right behind do not pay for the same failure; the control plane's health
checks take it out of the snapshot for good if it stays down. When every instance is
cooling down they are tried anyway: a guess beats refusing the request outright.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from contracts.routing import RoutedInstance
from contracts.sharing import SETTLE_S
from gateway.routing import policies
from gateway.routing.policies import EngineFigures, Load, PrefixTable, RoutingKey

_ENDED_KEPT = 1024  # urls whose last call's end is kept before the old ones are dropped
_PACE_WEIGHT = 0.3  # of the latest gap between two calls' starts in an instance's pace


class Balancer:
    def __init__(
        self, cooldown: float = 5.0, prefix_blocks: int = policies.PREFIX_TABLE_BLOCKS
    ) -> None:
        self._cooldown = cooldown
        self._in_flight: dict[str, int] = {}
        self._ended: dict[str, float] = {}  # when each url's last call ended (monotonic)
        self._began: dict[str, float] = {}  # when each url's last call began
        self._pace: dict[str, float] = {}  # seconds between its calls' starts, averaged
        # Called as each call ends (the queue feeder's nudge: a gap between online calls).
        self.on_release: Callable[[], None] | None = None
        self._turn: dict[str, int] = {}
        self._cooling: dict[str, float] = {}  # url -> monotonic time it may be used again
        self.prefixes = PrefixTable(prefix_blocks)
        # url -> the engine's latest figures (gateway.routing.engine_figures replaces it every
        # second).
        self.figures: Mapping[str, EngineFigures] = {}

    def in_flight(self, url: str) -> int:
        return self._in_flight.get(url, 0)

    def quiet_for(self, urls: Collection[str]) -> float:
        """Seconds since the last call to any of `urls` ended (inf: none lately)."""
        ended = [self._ended[url] for url in urls if url in self._ended]
        return time.monotonic() - max(ended) if ended else math.inf

    def next_call_in(self, url: str) -> float:
        """Seconds until the next call to `url` is due at the pace of its recent calls (0:
        due now or late; inf: no pace, its calls are not coming in a run)."""
        pace = self._pace.get(url)
        if pace is None:
            return math.inf
        return max(0.0, pace - (time.monotonic() - self._began[url]))

    def ranked(
        self,
        service: str,
        instances: Sequence[RoutedInstance],
        exclude: Collection[str] = (),
        policy: str = policies.LEAST_OUTSTANDING,
        key: RoutingKey | None = None,
    ) -> list[RoutedInstance]:
        """Candidates best first by `policy` (gateway.routing.policies): healthy before cooling,
        ties in turn. `service` names the pool (a service, or its prefill instances): turns and
        prefix blocks are its own. Under prefix_cache the first candidate becomes the owner of
        the prompt's blocks no other instance of the pool owns, even when it is the only one
        (so that it keeps them once the service has more)."""
        candidates = [i for i in instances if i.url not in exclude]
        blocks = key.blocks(service) if policy == policies.PREFIX_CACHE and key else ()
        if len(candidates) > 1:
            # A per-service turn, so traffic to one service does not skew another's rotation;
            # the policies' stable sorts keep the rotated order among ties.
            turn = self._turn.get(service, 0)
            self._turn[service] = turn + 1
            shift = turn % len(candidates)
            candidates = candidates[shift:] + candidates[:shift]
            cooling = self._cooling_now() if self._cooling else frozenset()
            load = Load(self._in_flight, self.figures, cooling)
            matched = self.prefixes.matched(blocks) if blocks else None
            held = self.prefixes.held()
            candidates = policies.rank(policy, candidates, load, key, matched, held)
        if blocks and candidates:
            self.prefixes.record(blocks, candidates[0].url, live={i.url for i in instances})
        return candidates

    def pick(
        self,
        service: str,
        instances: Sequence[RoutedInstance],
        exclude: Collection[str] = (),
    ) -> RoutedInstance | None:
        """The best candidate, skipping urls in `exclude`."""
        ranked = self.ranked(service, instances, exclude)
        return ranked[0] if ranked else None

    def cool_down(self, url: str) -> None:
        self._cooling[url] = time.monotonic() + self._cooldown

    def cooling(self, url: str) -> bool:
        return url in self._cooling_now()

    def _cooling_now(self) -> frozenset[str]:
        now = time.monotonic()
        for url in [u for u, until in self._cooling.items() if until <= now]:
            del self._cooling[url]
        return frozenset(self._cooling)

    def acquire(self, url: str) -> None:
        self._in_flight[url] = self._in_flight.get(url, 0) + 1
        now = time.monotonic()
        last = self._began.get(url)
        self._began[url] = now
        if last is None or now - last >= SETTLE_S:  # the first of a run of calls
            self._pace.pop(url, None)
        else:
            pace = self._pace.get(url)
            gap = now - last
            self._pace[url] = gap if pace is None else pace + _PACE_WEIGHT * (gap - pace)

    def release(self, url: str) -> None:
        now = time.monotonic()
        self._ended[url] = now
        if len(self._ended) > _ENDED_KEPT:  # bounded as instances come and go
            self._ended = {u: at for u, at in self._ended.items() if now - at < 60}
            self._began = {u: at for u, at in self._began.items() if u in self._ended}
            self._pace = {u: pace for u, pace in self._pace.items() if u in self._began}
        left = self._in_flight.get(url, 0) - 1
        if left > 0:
            self._in_flight[url] = left
        else:
            # Dropping idle entries keeps the table bounded as instances come and go.
            self._in_flight.pop(url, None)
        if self.on_release is not None:
            self.on_release()
