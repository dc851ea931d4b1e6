"""Token usage, counted by the gateways in Redis and moved into the database by the workers.

Layout: one hash per minute, ``wharf:usage:<epoch minute>``, with fields
``<service>|<key id>|<prompt|completion|requests|latency_ms|ttft_ms>`` (``<service>:<adapter>``
for a LoRA adapter's calls: usage_model) incremented with
HINCRBY. Gateways only ever write these live hashes. A gateway that restarts loses nothing
(the counts are in Redis); the workers' periodic flush claims a finished minute by renaming
its hash (atomic) to a name unique to that claim, ``wharf:usage:<minute>:flushing:<hex>``
(``flushing_key``), writes it to the database together with a row naming that key, then
deletes it (controlplane.usage.flush). ``wharf:usage:<minute>:flushing``, without the hex, is
the name older workers claimed under; the flush still recovers it.
The key id of a call made with a service's own token is ``SERVICE_TOKEN_ID``.
"""

from __future__ import annotations

import re
import secrets

from contracts.routing import ADAPTER_SEPARATOR

USAGE_PREFIX = "wharf:usage:"
FLUSHING_SUFFIX = ":flushing"
SERVICE_TOKEN_ID = "-"
# The key id of the copies a gateway mirrors to a service (gateway.routing.mirror): their tokens
# count to that service's usage, apart from its callers'.
MIRROR_KEY_ID = "~mirror"
# latency_ms and ttft_ms are sums over the minute's requests (averages = sum / requests),
# so the console can chart latency and time to first token without a metrics store.
# A request of an OpenAI batch (gateway.queues.feeder) counts in those like an online call, and
# again in the batch_ kinds, so that usage can say which part of it came from batches.
KINDS = ("prompt", "completion", "requests", "latency_ms", "ttft_ms",
         "batch_prompt", "batch_completion", "batch_requests")  # fmt: skip

# <minute>, <minute>:flushing (an older worker's claim) or <minute>:flushing:<hex>
_KEY = re.compile(rf"([0-9]+)(?:{FLUSHING_SUFFIX}(?::[0-9a-f]+)?)?")


def usage_key(epoch_seconds: float) -> str:
    return f"{USAGE_PREFIX}{int(epoch_seconds) // 60}"


def usage_field(service: str, key_id: str, kind: str) -> str:
    return f"{service}|{key_id}|{kind}"


def usage_model(service: str, adapter: str = "") -> str:
    """What a field counts: a service's base model, or one of its LoRA adapters as
    "<service>:<adapter>" (service names never hold ':')."""
    return f"{service}{ADAPTER_SEPARATOR}{adapter}" if adapter else service


def split_model(model: str) -> tuple[str, str]:
    """(service, adapter) of usage_model's value."""
    service, _, adapter = model.partition(ADAPTER_SEPARATOR)
    return service, adapter


def parse_field(field: str) -> tuple[str, str, str]:
    """(service, key id, kind); service names and key ids never contain '|'."""
    service, key_id, kind = field.split("|")
    return service, key_id, kind


def flushing_key(key: str) -> str:
    """A name for one claim of the minute `key` counts, never used before or after."""
    return f"{USAGE_PREFIX}{minute_of(key)}{FLUSHING_SUFFIX}:{secrets.token_hex(8)}"


def is_flushing(key: str) -> bool:
    """Whether `key` (a usage key) is claimed by a flush rather than a live minute's hash."""
    return FLUSHING_SUFFIX in key


def minute_of(key: str) -> int:
    """The epoch minute a usage hash counts (also for a key being flushed); ValueError for a
    key that is not one of contracts.usage's."""
    match = _KEY.fullmatch(key.removeprefix(USAGE_PREFIX)) if key.startswith(USAGE_PREFIX) else None
    if match is None:
        raise ValueError(f"not a usage key: {key!r}")
    return int(match.group(1))
