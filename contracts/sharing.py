"""One set of instances, online first (issue 29): an Async service's queue items and OpenAI
batches' requests run in the capacity online callers leave. Pure: the gateway's feeder asks
before each lease (gateway.queues.feeder)."""

from __future__ import annotations

import math
from collections.abc import Mapping

# An online call ended less than this long ago: online traffic is on, and queued work keeps
# to one item per instance (benchmarks/README.md, "Online beside a batch").
SETTLE_S = 2.0


def queued_slots(
    window: int,
    online: Mapping[str, int],
    queued: Mapping[str, int],
    quiet_for: float = math.inf,
) -> dict[str, int]:
    """How many more queued items each instance (the keys of `online`, its online calls in
    flight) may start now, `queued` being those it already works on: none anywhere while the
    service has an online call in flight (those in work finish; online calls go first); one
    per instance while online traffic is on (its last call ended `quiet_for` seconds ago, less
    than SETTLE_S: on an engine every sequence beside the next online call slows its first
    token); else what its `window` leaves."""
    if any(count > 0 for count in online.values()):
        return dict.fromkeys(online, 0)
    cap = min(window, 1) if quiet_for < SETTLE_S else window
    return {name: max(0, cap - queued.get(name, 0)) for name in online}
