"""A node's state, derived from its last heartbeat and the operator's marks: pure, so the API,
the console and the reconciler agree on it, and it is tested without servers."""

from __future__ import annotations

from datetime import datetime, timedelta

READY = "ready"
NOT_READY = "not_ready"  # silent past the grace: its worker, or the host, is down
CORDONED = "cordoned"  # takes no new instances; keeps the ones it has
DRAINING = "draining"  # takes no new instances and gives up the ones it has
STATES = (READY, NOT_READY, CORDONED, DRAINING)


def node_state(
    heartbeat_at: datetime | None, now: datetime, grace: timedelta, cordoned: bool, draining: bool
) -> str:
    """Silence wins over the marks: a node that does not answer acts on nothing."""
    if heartbeat_at is None or now - heartbeat_at > grace:
        return NOT_READY
    if draining:
        return DRAINING
    return CORDONED if cordoned else READY


def crossed_a_deadline(
    heartbeat_at: datetime | None, since: datetime, now: datetime, grace: timedelta,
    evict: timedelta,
) -> bool:  # fmt: skip
    """Whether a node's silence crossed one of its deadlines in (since, now]: the grace (it
    becomes not_ready: its instances leave routing) or the grace and the eviction (they are
    placed elsewhere)."""
    if heartbeat_at is None:
        return False
    return any(since < heartbeat_at + after <= now for after in (grace, grace + evict))


def parse_labels(text: str) -> dict[str, str]:
    """`gpu=h200,zone=a` (WHARF_NODE_LABELS, `manage.py worker --labels`) as a dict; raises
    ValueError naming the first item that is not key=value."""
    labels = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"label {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels
