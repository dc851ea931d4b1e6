"""Online calls in flight at other gateways, per instance, from their in-flight reports
(contracts.inflight, written every half second): the feeder adds them to its own balancer's
counts, so that queued work also yields to online calls another gateway routes. Read at most
every REPORT_INTERVAL. A report is a moment's count: an instance seen busy elsewhere counts as
busy for HOLD_S more, so that a gap between calls at the moment of a report does not let
queued work in. A Redis that cannot be read counts as no calls elsewhere (this gateway's own
calls still count at once)."""

from __future__ import annotations

import json
import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.inflight import INFLIGHT_PREFIX, REPORT_INTERVAL, service_load

log = logging.getLogger(__name__)

HOLD_S = 1.0


class OnlineElsewhere:
    def __init__(self, client: aioredis.Redis, own_key: str, prefix: str = INFLIGHT_PREFIX) -> None:
        self._client = client
        self._own = own_key
        self._prefix = prefix
        self._read_at = 0.0
        self._counts: dict[str, int] = {}
        self._busy_at: dict[str, float] = {}  # instance -> when a report last had it busy

    async def counts(self) -> dict[str, int]:
        """Online calls in flight per instance name at the other gateways."""
        if time.monotonic() - self._read_at < REPORT_INTERVAL:
            return self._counts
        self._read_at = time.monotonic()
        try:
            keys = [k async for k in self._client.scan_iter(match=self._prefix + "*", count=100)]
            keys = [k for k in keys if (k.decode() if isinstance(k, bytes) else k) != self._own]
            values = await self._client.mget(keys) if keys else []
        except (RedisError, OSError) as exc:
            log.debug("in-flight reports not read: %s", exc)
            self._counts = {}
            return self._counts
        reports = []
        for raw in values:
            try:
                report = json.loads(raw) if raw is not None else None
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(report, dict):
                reports.append(report)
        now = time.monotonic()
        counts = service_load(reports)[1]
        self._busy_at.update({name: now for name, n in counts.items() if n > 0})
        self._busy_at = {n: at for n, at in self._busy_at.items() if now - at < HOLD_S}
        self._counts = {name: max(counts.get(name, 0), 1) for name in self._busy_at}
        return self._counts
