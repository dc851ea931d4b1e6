"""Beat on every host, one leader: the fleet's periodic tasks are sent once, not once per host.

Every worker runs beat (`worker --beat`) with this scheduler (settings: CELERY_BEAT_SCHEDULER).
An entry routed to a node's own queue (`wharf.node.<name>`, e.g. the model-cache prune) is
that host's work and every host's beat sends it. Every other entry (reconcile-all,
flush-usage) is fleet-wide: only the beat holding the lease contracts.beat.LEASE_KEY sends
it; the others reserve it (its next run moves on) without sending, so a follower that takes
over sends at the entry's next due time, not a backlog.

The lease is a Redis key set with NX and a TTL of WHARF_BEAT_LEASE_S, renewed (only by its
holder: compare-and-expire) every quarter of that from the scheduler's tick, and given back on
a clean stop. A leader that dies is replaced at most 1.25 leases later: its key lapses after
one lease, and a follower tries again every quarter. A leader sends only while its own clock
says the lease it last confirmed has not run out, so a leader cut off from Redis stops
sending before a follower can start.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from datetime import UTC, datetime

import redis
from celery.beat import PersistentScheduler
from django.conf import settings
from redis.backoff import NoBackoff
from redis.exceptions import LockError
from redis.retry import Retry

from contracts import beat

log = logging.getLogger(__name__)

NODE_QUEUE_PREFIX = "wharf.node."


def node_local(options: dict) -> bool:
    """Whether a schedule entry is its host's own work: routed to a node's queue."""
    return str(options.get("queue") or "").startswith(NODE_QUEUE_PREFIX)


def check_due(now: float, checked_at: float | None, lease: float) -> bool:
    """Whether to take or renew the lease now: a quarter of a lease after the last try."""
    return checked_at is None or now - checked_at >= lease / 4


def leads(now: float, confirmed_at: float | None, lease: float) -> bool:
    """Whether this beat leads: Redis confirmed the lease (its TTL starting after
    `confirmed_at`, which is taken before the call) less than a lease ago."""
    return confirmed_at is not None and now - confirmed_at < lease


def next_check_in(now: float, checked_at: float | None, lease: float) -> float:
    """Seconds until the next take-or-renew, so that beat wakes for it between entries."""
    if checked_at is None:
        return 0.0
    return max(0.0, checked_at + lease / 4 - now)


def lease_client(url: str, lease: float) -> redis.Redis:
    """A client whose calls fail within a quarter lease, without retries of its own (the
    lease is tried again a quarter lease later): beat's loop, and the host's own entries,
    never wait on a Redis that hangs or is away for longer."""
    return redis.Redis.from_url(url, socket_timeout=lease / 4, socket_connect_timeout=lease / 4,
                                retry=Retry(NoBackoff(), 0))  # fmt: skip


def slow_takeover(lease: float, period: float) -> str | None:
    """A warning when a dead leader would be replaced later than one fleet-wide period."""
    if lease * 1.25 <= period:
        return None
    return (f"WHARF_BEAT_LEASE_S={lease:g}: a dead beat leader is replaced within "
            f"{lease * 1.25:g} s, more than WHARF_RECONCILE_INTERVAL ({period:g} s); "
            f"set it to {period * 0.8:g} or less")  # fmt: skip


class BeatLease:
    """The Redis edge of the lease: take, renew, give back; and the handover event."""

    def __init__(self, client: redis.Redis, node: str, lease: float) -> None:
        self.node, self.lease = node, lease
        self.token = f"{node}/{secrets.token_hex(8)}"
        self._lock = client.lock(beat.LEASE_KEY, timeout=lease, thread_local=False)
        self._client = client
        self.checked_at: float | None = None
        self.confirmed_at: float | None = None

    def keep(self, now: float) -> None:
        """Take the lease if free, renew it if held; errors leave the last confirmation."""
        if not check_due(now, self.checked_at, self.lease):
            return
        self.checked_at = now
        try:
            if self.confirmed_at is not None and self._renew():
                self.confirmed_at = now
            elif self._lock.acquire(blocking=False, token=self.token):
                self.confirmed_at = now
                self._record_term()
            else:
                self._lost()
        except redis.RedisError as exc:  # leads on until the confirmed lease runs out
            log.warning("beat: cannot reach Redis for the leader lease: %s", exc)

    def _renew(self) -> bool:
        try:
            self._lock.reacquire()
            return True
        except LockError:  # it lapsed and may be someone else's now
            return False

    def _lost(self) -> None:
        if self.confirmed_at is not None:
            log.warning("beat: %s lost the leader lease to %s", self.node,
                        beat.holder(self._client.get(beat.LEASE_KEY)))  # fmt: skip
        self.confirmed_at = None

    def _record_term(self) -> None:
        at = datetime.now(UTC).isoformat()
        previous = self._client.get(beat.TERM_KEY)
        event = beat.handover(json.loads(previous) if previous else None, self.node, at)
        with self._client.pipeline() as pipe:
            pipe.set(beat.TERM_KEY, json.dumps({"leader": self.node, "since": at}))
            pipe.lpush(beat.HANDOVERS_KEY, json.dumps(event))
            pipe.ltrim(beat.HANDOVERS_KEY, 0, beat.HANDOVERS_KEPT - 1)
            pipe.execute()
        level = logging.WARNING if event["reason"] == beat.TAKEOVER else logging.INFO
        log.log(level, beat.describe(event))

    def leads(self, now: float) -> bool:
        return leads(now, self.confirmed_at, self.lease)

    def release(self) -> None:
        """Give the lease back (a clean stop), so a follower takes it at its next try."""
        if self.confirmed_at is None:
            return
        self.confirmed_at = None
        try:
            self._lock.release()
            term = json.loads(self._client.get(beat.TERM_KEY) or "{}")
            if term.get("leader") == self.node:
                term["released_at"] = datetime.now(UTC).isoformat()
                self._client.set(beat.TERM_KEY, json.dumps(term))
            log.info("beat: %s gave the leader lease back", self.node)
        except (LockError, redis.RedisError) as exc:  # it lapses by itself within a lease
            log.warning("beat: could not give the leader lease back: %s", exc)


class LeaderScheduler(PersistentScheduler):
    """Celery's persistent scheduler, sending fleet-wide entries only while it leads."""

    def __init__(self, *args, **kwargs) -> None:
        lease = settings.WHARF_BEAT_LEASE_S
        if warning := slow_takeover(lease, settings.WHARF_RECONCILE_INTERVAL):
            log.warning(warning)
        self.lease = BeatLease(
            lease_client(settings.REDIS_URL, lease), settings.WHARF_NODE_NAME, lease
        )
        super().__init__(*args, **kwargs)

    def tick(self, *args, **kwargs) -> float:
        self.lease.keep(time.monotonic())
        delay = super().tick(*args, **kwargs)
        return min(delay, next_check_in(time.monotonic(), self.lease.checked_at, self.lease.lease))

    def apply_entry(self, entry, producer=None) -> None:
        if node_local(entry.options) or self.lease.leads(time.monotonic()):
            super().apply_entry(entry, producer=producer)
        else:
            log.debug("beat: %s not sent: another host leads beat", entry.name)

    def close(self) -> None:
        self.lease.release()
        super().close()
