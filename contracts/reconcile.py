"""How a reconcile pass of a service is asked for, by the API (a spec changed, a node was
drained) and by the workers (a pass that must come back): by Celery task name, so that the
control plane never imports the workers.

Asks coalesce: while a pass is queued, another ask due no sooner adds nothing; one due sooner
(an instance turned ready while the pass queued to follow its start waits out its delay) is
queued too, and the marker keeps the sooner time. The marker expires, so a pass lost with a
dead worker is asked again by the periodic pass. A queued pass carries when it was asked, and
one whose service has had a whole pass start after that is skipped when its turn comes: that
pass saw what it was asked for, and asked its own follow-up (at fleet size, each instance
turned ready asked a pass that asked its own follow-up, and the earlier follow-ups all ran
too: five passes per service in a burst). No Django here: the caller hands its Redis client
and its Celery app.

The marker goes when a pass starts, after its start is stamped and before it reads anything.
An ask made before then is either its own queued pass, which this one covers, or coalesced
into one that this one covers, and this pass sees its change. An ask made after finds no marker,
or one set after the stamp, and so has a pass this one does not cover. The marker once went
before the stamp: an ask between the two set a marker whose pass the new one then covered, and
every change coalesced into that marker while the pass ran was left for the periodic pass (a
service with all its instances ready waited 23 s to be routed in the fleet simulator).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TASK = "workers.tasks.reconcile_service"
# A worker killed with a pass reserved (Celery gives it back only after an hour) holds its
# marker until it expires: short, so that the periodic pass asks again within seconds. A queue
# slower than this only costs a duplicate pass, which the per-service lock serializes.
PENDING_TTL = 15  # seconds


def pending_key(name: str) -> str:
    return f"wharf:reconcile:pending:{name}"


def ran_key(name: str) -> str:
    return f"wharf:reconcile:ran:{name}"


RAN_TTL = 600  # seconds; longer than any pass's countdown, so a stale pass is known as such

# The marker holds when the queued pass is due (seconds since the epoch, the Redis server's
# clock): set when absent or later than this ask's; the ask's time when this ask must be
# queued, nothing when not.
_SOONER = """local now = redis.call('time')
now = tonumber(now[1]) + tonumber(now[2]) / 1e6
local due = now + tonumber(ARGV[1])
local queued = tonumber(redis.call('get', KEYS[1]) or '')
if queued and queued <= due + 0.05 then return false end
redis.call('set', KEYS[1], string.format('%.3f', due), 'EX', math.ceil(ARGV[1] + ARGV[2]))
return string.format('%.6f', now)"""


def ask(redis: Any, celery: Any, name: str, countdown: float = 0) -> None:
    """Queue one pass of service `name` unless one already queued is due as soon."""
    asked = redis.eval(_SOONER, 1, pending_key(name), countdown, PENDING_TTL)
    if asked:
        celery.send_task(TASK, args=[name], kwargs={"asked": float(asked)}, countdown=countdown)


# The periodic pass over every service (reconcile-all) heals drift; nothing waits for it. Its
# passes go in the broker's last priority list (Redis: 0, what every other message gets, is
# taken first, 9 last), so a fan-out over 500 services does not stand between a node's
# eviction or a create and its pass (benchmarks/README.md, "Fleet at scale"). Its marker is not
# a due time: an ask of the other kind is never coalesced with it, and is queued ahead.
SWEEP_PRIORITY = 9
_SWEEP = """if redis.call('exists', KEYS[1]) == 1 then return false end
local now = redis.call('time')
redis.call('set', KEYS[1], 'sweep', 'EX', ARGV[1])
return string.format('%.6f', tonumber(now[1]) + tonumber(now[2]) / 1e6)"""


def sweep(redis: Any, celery: Any, names: Iterable[str]) -> None:
    """Queue one pass of each of `names` behind every other pass, unless one of any kind is
    queued for it: the markers in one round trip, the passes sent on one connection (one call
    and one send per service took reconcile-all 5.5 to 8.4 s at 500 services)."""
    names = list(names)
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.eval(_SWEEP, 1, pending_key(name), PENDING_TTL)
        asked = pipe.execute()
    due = [(name, float(at)) for name, at in zip(names, asked, strict=True) if at]
    if not due:
        return
    with celery.producer_or_acquire() as producer:
        for name, at in due:
            celery.send_task(TASK, args=[name], kwargs={"asked": at},
                             priority=SWEEP_PRIORITY, producer=producer)  # fmt: skip


def now(redis: Any) -> float:
    """The Redis server's clock, the one asks are stamped with."""
    seconds, micros = redis.time()
    return seconds + micros / 1e6


def covered(redis: Any, name: str, asked: float) -> bool:
    """Whether a whole pass of `name` started after an ask made at `asked`."""
    ran = redis.get(ran_key(name))
    return ran is not None and float(ran) > asked


def ran(redis: Any, name: str, started: float) -> None:
    """A pass of `name` that started at `started` (`now`) has finished. Passes of a service
    run one at a time, so each finished one started after the one before."""
    redis.set(ran_key(name), f"{started:.6f}", ex=RAN_TTL)
