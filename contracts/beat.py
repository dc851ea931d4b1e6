"""Which host leads beat: a lease in Redis, read by the API, held by the workers (workers.beat).

Every worker host runs beat, but only the holder of the lease `LEASE_KEY` sends the fleet-wide
periodic tasks (the reconcile-all pass, the usage flush); the others send only their own
host's work. The lease's value is `<node>/<random>`, so reading it says who leads. Each time a
host takes the lease it writes its term to `TERM_KEY` and an event to `HANDOVERS_KEY` (the
newest `HANDOVERS_KEPT`): a takeover after a leader died is visible, not only logged.
No Django here: the caller hands its Redis client.
"""

from __future__ import annotations

import json
from typing import Any

LEASE_KEY = "wharf:beat:lease"
TERM_KEY = "wharf:beat:term"  # the last leader's term: {"leader", "since", "released_at"}
HANDOVERS_KEY = "wharf:beat:handovers"  # newest first, JSON events (handover())
HANDOVERS_KEPT = 20

# Why a host took the lease, given the term before its own.
FIRST = "first"  # no leader before it
TAKEOVER = "takeover"  # another host led and its lease lapsed: it died or lost Redis
HANDOVER = "handover"  # another host led and gave the lease back on a clean stop
RESUMED = "resumed"  # this host led before (its beat restarted, or it lost the lease a while)
REASONS = (FIRST, TAKEOVER, HANDOVER, RESUMED)


def holder(token: bytes | str | None) -> str | None:
    """The node named by a lease value `<node>/<random>` (None: nobody holds the lease)."""
    if token is None:
        return None
    text = token.decode() if isinstance(token, bytes) else token
    return text.rpartition("/")[0] or None


def handover(previous: dict | None, leader: str, at: str) -> dict:
    """The event of `leader` taking the lease at `at` after the term `previous` (or none)."""
    before = (previous or {}).get("leader")
    if not before:
        reason = FIRST
    elif before == leader:
        reason = RESUMED
    elif (previous or {}).get("released_at"):
        reason = HANDOVER
    else:
        reason = TAKEOVER
    return {"at": at, "leader": leader, "previous": before, "reason": reason}


def describe(event: dict) -> str:
    """One log line for a handover event."""
    leader, before = event["leader"], event["previous"]
    return {
        FIRST: f"beat: {leader} leads (no leader before it)",
        RESUMED: f"beat: {leader} leads again",
        HANDOVER: f"beat: {leader} leads, {before} gave the lease back",
        TAKEOVER: f"beat: {leader} takes over from {before}, whose lease lapsed",
    }[event["reason"]]


def leadership(redis: Any) -> dict:
    """What the API shows: the leader now (None while nobody holds the lease), its term's
    start, and the newest handovers first."""
    with redis.pipeline(transaction=False) as pipe:
        pipe.get(LEASE_KEY)
        pipe.get(TERM_KEY)
        pipe.lrange(HANDOVERS_KEY, 0, HANDOVERS_KEPT - 1)
        token, term, events = pipe.execute()
    leader = holder(token)
    term = json.loads(term) if term else {}
    return {
        "leader": leader,
        "since": term.get("since") if leader and term.get("leader") == leader else None,
        "handovers": [json.loads(event) for event in events],
    }
