"""One set of instances, online first (issue 29): an Async service's queue items and OpenAI
batches' requests run in the capacity online callers leave. Pure: the gateway's feeder asks
before each lease (gateway.queues.feeder)."""

from __future__ import annotations

import math
from collections.abc import Mapping

# An online call ended less than this long ago: online traffic is on, and queued work keeps
# to one item per instance, each in a gap between online calls (benchmarks/README.md,
# "Online beside a batch").
SETTLE_S = 2.0
# While online traffic is on, an item starts only where the next online call is expected no
# sooner than this many times an item's usual duration: the lease, the engine's own variance.
GAP_MARGIN = 1.25


def queued_slots(
    window: int,
    online: Mapping[str, int],
    queued: Mapping[str, int],
    quiet_for: float = math.inf,
    next_call_in: Mapping[str, float] | None = None,
    item_s: float = 0.0,
) -> dict[str, int]:
    """How many more queued items each instance (the keys of `online`, its online calls in
    flight) may start now, `queued` being those it already works on: none anywhere while the
    service has an online call in flight (those in work finish; online calls go first); while
    online traffic is on (its last call ended `quiet_for` seconds ago, less than SETTLE_S), one
    per instance, and only where it should end before that instance's next online call
    (`next_call_in`, seconds, from the calls' recent pace; absent: unknown) given an item's
    usual duration `item_s`: on an engine every sequence beside an online call slows its first
    token; else what its `window` leaves."""
    if any(count > 0 for count in online.values()):
        return dict.fromkeys(online, 0)
    if quiet_for >= SETTLE_S:
        return {name: max(0, window - queued.get(name, 0)) for name in online}
    due = next_call_in or {}
    return {
        name: int(
            window > 0
            and not queued.get(name, 0)
            and item_s * GAP_MARGIN <= due.get(name, math.inf)
        )
        for name in online
    }
