"""Least-outstanding-requests load balancing; pure bookkeeping, no I/O.

Counting in-flight requests per instance suits LLM engines: a request's cost varies by
orders of magnitude (a long generation vs a short one), so spreading by what is still
running beats plain round robin. Ties, including the idle case, rotate so that equal
instances share the load evenly.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from contracts.routing import RoutedInstance


class Balancer:
    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}
        self._turn: dict[str, int] = {}

    def in_flight(self, url: str) -> int:
        return self._in_flight.get(url, 0)

    def pick(
        self,
        service: str,
        instances: Sequence[RoutedInstance],
        exclude: Collection[str] = (),
    ) -> RoutedInstance | None:
        """The instance with the fewest in-flight requests, skipping urls in `exclude`."""
        candidates = [i for i in instances if i.url not in exclude]
        if not candidates:
            return None
        fewest = min(self.in_flight(i.url) for i in candidates)
        tied = [i for i in candidates if self.in_flight(i.url) == fewest]
        # A per-service turn counter, so traffic to one service does not skew another's rotation.
        turn = self._turn.get(service, 0)
        self._turn[service] = turn + 1
        return tied[turn % len(tied)]

    def acquire(self, url: str) -> None:
        self._in_flight[url] = self._in_flight.get(url, 0) + 1

    def release(self, url: str) -> None:
        left = self._in_flight.get(url, 0) - 1
        if left > 0:
            self._in_flight[url] = left
        else:
            # Dropping idle entries keeps the table bounded as instances come and go.
            self._in_flight.pop(url, None)
