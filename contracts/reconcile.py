"""How a reconcile pass of a service is asked for, by the API (a spec changed, a node was
drained) and by the workers (a pass that must come back): by Celery task name, so that the
control plane never imports the workers.

Asks coalesce: while a pass is queued, another ask due no sooner adds nothing; one due sooner
(an instance turned ready while the pass queued to follow its start waits out its delay) is
queued too, and the marker keeps the sooner time. The marker expires, so a pass lost with a
dead worker is asked again by the periodic pass. No Django here: the caller hands
its Redis client and its Celery app.
"""

from __future__ import annotations

from typing import Any

TASK = "workers.tasks.reconcile_service"
# A worker killed with a pass reserved (Celery gives it back only after an hour) holds its
# marker until it expires: short, so that the periodic pass asks again within seconds. A queue
# slower than this only costs a duplicate pass, which the per-service lock serializes.
PENDING_TTL = 15  # seconds


def pending_key(name: str) -> str:
    return f"wharf:reconcile:pending:{name}"


# The marker holds when the queued pass is due (seconds since the epoch, the Redis server's
# clock): set when absent or later than this ask's; 1 when this ask must be queued.
_SOONER = """local due = redis.call('time')
due = tonumber(due[1]) + tonumber(due[2]) / 1e6 + tonumber(ARGV[1])
local queued = tonumber(redis.call('get', KEYS[1]) or '')
if queued and queued <= due + 0.05 then return 0 end
redis.call('set', KEYS[1], string.format('%.3f', due), 'EX', math.ceil(ARGV[1] + ARGV[2]))
return 1"""


def ask(redis: Any, celery: Any, name: str, countdown: float = 0) -> None:
    """Queue one pass of service `name` unless one already queued is due as soon."""
    if redis.eval(_SOONER, 1, pending_key(name), countdown, PENDING_TTL):
        celery.send_task(TASK, args=[name], countdown=countdown)
