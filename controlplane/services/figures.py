"""The call figures the gateways measured (contracts.call_figures), read from Redis for the
API (a mirror's side by side) and the canary controller (workers.scheduling.canaries)."""

from __future__ import annotations

import time

import redis
from django.conf import settings

from contracts.call_figures import Figures, key, slots_between


def read_figures(service: str, track: str, since: float, until: float | None = None) -> dict:
    """What the gateways measured of (service, track) from `since` (epoch seconds) to now:
    Figures.summary(). Raises redis.RedisError when Redis does not answer."""
    until = time.time() if until is None else until
    names = [key(service, track, at) for at in slots_between(since, until)]
    with redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5) as client:
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(name)
        return Figures.from_hashes(pipe.execute()).summary()
