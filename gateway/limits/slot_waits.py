"""Waiting for a worker slot at an instance (metadata.rpc.worker_threads) without spinning Redis.

A request queued at an instance asks Redis for a slot (gateway.limits.scripts' SLOT), then
sleeps: a short while at first, twice as long after each miss, at most MAX_WAIT_S, with
jitter so that waiters spread out. A slot this process frees wakes this process's waiters at
that instance at once (`SlotWaits.wake`, once Redis has the release); a slot freed by another
gateway is found at the next try, within MAX_WAIT_S. Each waiter costs Redis at most a few
calls a second, and there are at most max_queue_size of them per instance.

Waiters are not served in arrival order: whoever asks first after a slot frees takes it.
Newcomers never overtake them, though (the admission script queues a newcomer wherever
someone waits).
"""

from __future__ import annotations

import asyncio
import random
from contextlib import suppress

FIRST_WAIT_S = 0.01
MAX_WAIT_S = 0.2


def backoff(previous: float) -> float:
    """The next wait after a miss: double the previous, at most MAX_WAIT_S."""
    return min(previous * 2, MAX_WAIT_S)


class SlotWaits:
    """Per worker set, an event its local waiters sleep on until a slot may be free."""

    def __init__(self) -> None:
        self._events: dict[str, tuple[asyncio.Event, int]] = {}

    async def sleep(self, key: str, seconds: float) -> None:
        """Sleep up to about `seconds` (jittered), less if a slot at `key` frees here."""
        event, waiting = self._events.get(key) or (asyncio.Event(), 0)
        self._events[key] = (event, waiting + 1)
        try:
            with suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), seconds * random.uniform(0.5, 1.0))
        finally:
            current = self._events.get(key)
            if current is not None and current[0] is event:
                if current[1] <= 1:
                    del self._events[key]
                else:
                    self._events[key] = (event, current[1] - 1)

    def wake(self, keys: list[str]) -> None:
        """Slots at `keys` were freed: wake whoever waits for them here."""
        for key in keys:
            found = self._events.pop(key, None)
            if found is not None:
                found[0].set()
