"""One set of instances, online first (issue 29): an Async service's queue items and OpenAI
batches' requests run in the capacity online callers leave. Pure: the gateway's feeder asks
before each lease (gateway.queues.feeder)."""

from __future__ import annotations

from collections.abc import Mapping


def queued_slots(
    window: int, online: Mapping[str, int], queued: Mapping[str, int]
) -> dict[str, int]:
    """How many more queued items each instance (the keys of `online`, its online calls in
    flight) may start now, `queued` being those it already works on: none anywhere while the
    service has an online call in flight (those in work finish; online calls go first), else
    what its `window` leaves."""
    if any(count > 0 for count in online.values()):
        return dict.fromkeys(online, 0)
    return {name: max(0, window - queued.get(name, 0)) for name in online}
