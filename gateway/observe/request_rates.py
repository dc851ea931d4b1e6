"""Requests per second each service receives at this gateway, over a sliding window: the
autoscaler's demand signal (contracts.inflight's `qps`).

Counted per second in a short list per service, so counting a request costs a dict lookup
and an addition; the rate is the window's count over the window's length (a gateway that
started less than a window ago reports less than it gets, for that long).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from contracts.inflight import QPS_WINDOW


class RequestRates:
    def __init__(
        self, window: float = QPS_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window = window
        self._seconds = max(1, round(window))  # whole-second buckets in the window
        self._clock = clock
        self._counts: dict[str, deque[list[int]]] = {}  # service -> [[second, count], ...]

    def count(self, service: str) -> None:
        """One request reached `service`."""
        second = int(self._clock())
        buckets = self._counts.get(service)
        if buckets is None:
            buckets = self._counts[service] = deque()
        if buckets and buckets[-1][0] == second:
            buckets[-1][1] += 1
        else:
            buckets.append([second, 1])
            self._expire(buckets, second)

    def rates(self) -> dict[str, float]:
        """Requests/s per service over the window; services with none are forgotten."""
        second = int(self._clock())
        rates: dict[str, float] = {}
        for service, buckets in list(self._counts.items()):
            self._expire(buckets, second)
            if buckets:
                rates[service] = sum(count for _, count in buckets) / self._window
            else:
                del self._counts[service]
        return rates

    def _expire(self, buckets: deque[list[int]], second: int) -> None:
        while buckets and buckets[0][0] <= second - self._seconds:
            buckets.popleft()
