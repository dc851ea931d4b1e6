"""The gateway's background loops (snapshot watch, Redis probe, usage and lease flushes)."""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

log = logging.getLogger(__name__)
STOP_GRACE = 5.0  # seconds a cancelled loop gets to finish


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Stop a background loop and wait until it has: shutdown then leaves nothing running.

    The wait goes through asyncio.wait, bounded: a stop must end even if a loop is caught in a
    client library that does not give way to its cancellation at once (seen when the server
    could not bind its port right after start-up, so shutdown came before the loops settled).
    """
    if task is None:
        return
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=STOP_GRACE)
    if not done:
        log.warning("%s did not stop within %.0f s of its cancel", task.get_name(), STOP_GRACE)
        return
    with suppress(asyncio.CancelledError):
        task.result()


async def flush_every(interval: float, pending, health, flush, what: str) -> None:
    """Send what `pending()` says waits, every `interval` seconds, while Redis answers: a
    failure leaves it waiting for the next try (`flush` keeps it) and marks Redis down if it
    is unreachable."""
    from redis.exceptions import RedisError

    from gateway.health import UNREACHABLE

    while True:
        await asyncio.sleep(interval)
        if not pending():
            continue
        await health.wait_up()
        try:
            await flush()
        except UNREACHABLE as exc:
            health.failed(exc)
        except RedisError:
            log.exception("writing %s failed; keeping them for the next try", what)
