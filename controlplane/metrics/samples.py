"""The samples the nodes' scrapers keep in Redis (contracts.engine_load), read back for one
service's instances: the newest, the rates over about the last minute, and a series of points
for the console's charts."""

from __future__ import annotations

from collections.abc import Iterable

import redis
from django.conf import settings

from contracts import engine_load

RATE_SPAN = 60.0  # seconds the summary's rates cover, at most
POINT_FIELDS = ("running", "waiting", "kv_cache", "prefix_hit_rate", "ttft", "generation_tps")
_clients: dict[str, redis.Redis] = {}


def store() -> redis.Redis:
    """The Redis the scrapers write to (one client per URL: settings may change in tests)."""
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return _clients[url]


def read(client: redis.Redis, instances: Iterable[str]) -> dict[str, tuple[dict | None, list]]:
    """Each instance's latest sample (None once stale or never scraped) and its series,
    oldest first, in one round trip. Raises redis.RedisError."""
    names = list(instances)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.get(engine_load.latest_key(name))
        pipe.lrange(engine_load.series_key(name), 0, engine_load.KEEP - 1)
    answers = pipe.execute()
    out = {}
    for i, name in enumerate(names):
        series = [engine_load.decode(raw) for raw in reversed(answers[2 * i + 1])]
        out[name] = (engine_load.decode(answers[2 * i]), [s for s in series if s is not None])
    return out


def recent_rates(series: list[dict[str, float]]) -> dict[str, float]:
    """The rates between the newest sample and the oldest of the last RATE_SPAN seconds."""
    if len(series) < 2:
        return {}
    newest = series[-1]
    older = next(s for s in series if s["at"] >= newest["at"] - RATE_SPAN)
    return engine_load.rates(newest, older) if older is not newest else {}


def points(series: list[dict[str, float]], since: float) -> list[dict[str, float | None]]:
    """The series from `since` as chart points: gauges as scraped, rates over the step from
    the sample before (None where nothing moved: no request, or the engine restarted)."""
    out: list[dict[str, float | None]] = []
    for before, sample in zip([None, *series], series, strict=False):
        if sample["at"] < since:
            continue
        values = {**sample, **(engine_load.rates(sample, before) if before else {})}
        out.append({"time": sample["at"], **{f: values.get(f) for f in POINT_FIELDS}})
    return out
