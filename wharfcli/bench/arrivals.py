"""When the dynamic benchmark sends each request: a Poisson process at the asked rate.

The gaps between arrivals are exponential with mean 1/rate (ModelArts' benchmark_serving and
vLLM's do the same), so requests bunch and thin out as real traffic does; the first request
goes at once. The schedule is a pure function of its seeded random generator: the same seed
gives the same arrivals, so two runs against two deployments are comparable.
"""

from __future__ import annotations

import random


def poisson_schedule(rate: float, count: int, rng: random.Random) -> list[float]:
    """`count` send times in seconds from the start, non-decreasing, the first at 0."""
    if rate <= 0 or count < 0:
        raise ValueError("rate must be above 0 and count at least 0")
    times, now = [], 0.0
    for index in range(count):
        if index:
            now += rng.expovariate(rate)
        times.append(now)
    return times
