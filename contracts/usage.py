"""Token usage, counted by the gateways in Redis and moved into the database by the workers.

Layout: one hash per minute, ``wharf:usage:<epoch minute>``, with fields
``<service>|<key id>|<prompt|completion|requests>`` incremented with HINCRBY. A gateway that
restarts loses nothing (the counts are in Redis); the workers' periodic flush renames a
finished minute's hash to ``…:flushing`` (atomic), writes it to the database, then deletes it.
The key id of a call made with a service's own token is ``SERVICE_TOKEN_ID``.
"""

from __future__ import annotations

USAGE_PREFIX = "wharf:usage:"
FLUSHING_SUFFIX = ":flushing"
SERVICE_TOKEN_ID = "-"
# latency_ms and ttft_ms are sums over the minute's requests (averages = sum / requests),
# so the console can chart latency and time to first token without a metrics store.
KINDS = ("prompt", "completion", "requests", "latency_ms", "ttft_ms")


def usage_key(epoch_seconds: float) -> str:
    return f"{USAGE_PREFIX}{int(epoch_seconds) // 60}"


def usage_field(service: str, key_id: str, kind: str) -> str:
    return f"{service}|{key_id}|{kind}"


def parse_field(field: str) -> tuple[str, str, str]:
    """(service, key id, kind); service names and key ids never contain '|'."""
    service, key_id, kind = field.split("|")
    return service, key_id, kind


def minute_of(key: str) -> int:
    """The epoch minute a usage hash counts (also for a key being flushed)."""
    return int(key.removeprefix(USAGE_PREFIX).removesuffix(FLUSHING_SUFFIX))
