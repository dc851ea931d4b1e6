"""Least-outstanding-requests load balancing with a cool-down for failing instances; no I/O.

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

import time
from collections.abc import Collection, Sequence

from contracts.routing import RoutedInstance


class Balancer:
    def __init__(self, cooldown: float = 5.0) -> None:
        self._cooldown = cooldown
        self._in_flight: dict[str, int] = {}
        self._turn: dict[str, int] = {}
        self._cooling: dict[str, float] = {}  # url -> monotonic time it may be used again

    def in_flight(self, url: str) -> int:
        return self._in_flight.get(url, 0)

    def ranked(
        self,
        service: str,
        instances: Sequence[RoutedInstance],
        exclude: Collection[str] = (),
        policy: str = "least_outstanding",
    ) -> list[RoutedInstance]:
        """Candidates best first: healthy before cooling, then (least_outstanding) fewest in
        flight, ties in turn; `round_robin` keeps the turn order alone."""
        candidates = [i for i in instances if i.url not in exclude]
        if len(candidates) > 1:
            # A per-service turn, so traffic to one service does not skew another's rotation;
            # the stable sort below keeps the rotated order among ties.
            turn = self._turn.get(service, 0)
            self._turn[service] = turn + 1
            shift = turn % len(candidates)
            candidates = candidates[shift:] + candidates[:shift]
            cooling = self._cooling_now() if self._cooling else frozenset()
            if policy == "round_robin":
                candidates.sort(key=lambda i: i.url in cooling)
            else:
                candidates.sort(key=lambda i: (i.url in cooling, self._in_flight.get(i.url, 0)))
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

    def release(self, url: str) -> None:
        left = self._in_flight.get(url, 0) - 1
        if left > 0:
            self._in_flight[url] = left
        else:
            # Dropping idle entries keeps the table bounded as instances come and go.
            self._in_flight.pop(url, None)
