"""How a reconcile pass of a service is asked for, by the API (a spec changed, a node was
drained) and by the workers (a pass that must come back): by Celery task name, so that the
control plane never imports the workers.

Asks coalesce: while a pass is queued, another ask adds nothing. The marker expires, so a pass
lost with a dead worker is asked again by the periodic pass. No Django here: the caller hands
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


def ask(redis: Any, celery: Any, name: str, countdown: float = 0) -> None:
    """Queue one pass of service `name` unless one is already queued."""
    if redis.set(pending_key(name), "1", nx=True, ex=PENDING_TTL):
        celery.send_task(TASK, args=[name], countdown=countdown)
