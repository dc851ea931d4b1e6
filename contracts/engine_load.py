"""What the nodes scrape from their engines' own metrics, kept in Redis for the gateways (the
cache-aware routing policies), the autoscaler and the console. No Django: both planes read it.

Redis layout, per instance (its name):
- ``wharf:engine:latest:<instance>``: the newest sample's JSON, expiring after ``STALE``
  seconds, so an instance whose engine stopped answering (or that is gone) has none;
- ``wharf:engine:series:<instance>``: a list of samples, newest first, at most ``KEEP`` of
  them (LPUSH then LTRIM), expiring ``SERIES_TTL`` seconds after the last write.

A sample, JSON::

    {"at": 1717000000.5,        # unix seconds when it was scraped
     "running": 3,              # requests the engine is running
     "waiting": 1,              # requests waiting in its queue
     "kv_cache": 0.42,          # KV-cache usage, 0..1
     "prefix_hits": 1200,       # counters since the engine started: prefix-cache tokens hit
     "prefix_queries": 1500,    #   and looked up,
     "ttft_sum": 12.5,          #   time to first token, seconds summed
     "ttft_count": 40,          #   over this many requests,
     "itl_sum": 3.1,            #   time between two output tokens, seconds summed
     "itl_count": 900,          #   over this many tokens,
     "prompt_tokens": 9000, "generation_tokens": 4000,
     "spec_drafts": 0, "spec_draft_tokens": 0, "spec_accepted_tokens": 0}

A field the engine does not report is left out. Rates (hit rate, TTFT, tokens/s) come from
two samples' counters (``rates``). An engine serving LoRA adapters also has
``wharf:engine:adapters:<instance>``: the adapters its requests use now, a JSON list, expiring
after ``STALE`` seconds (the LoRA-aware routing in gateway.routing.policies).
"""

from __future__ import annotations

import json
import math
from typing import Any

LATEST_PREFIX = "wharf:engine:latest:"
SERIES_PREFIX = "wharf:engine:series:"
# The LoRA adapters an engine's requests use now (its slots), JSON list, expiring after STALE.
ADAPTERS_PREFIX = "wharf:engine:adapters:"
INTERVAL = 2.0  # seconds between two scrapes of an instance
STALE = 10  # seconds a latest sample counts (an int: SET ... EX takes no fraction)
KEEP = 450  # samples in a series: 15 minutes at INTERVAL
SERIES_TTL = 900

GAUGES = ("running", "waiting", "kv_cache")
COUNTERS = (
    "prefix_hits", "prefix_queries", "ttft_sum", "ttft_count", "itl_sum", "itl_count",
    "prompt_tokens", "generation_tokens", "spec_drafts", "spec_draft_tokens",
    "spec_accepted_tokens",
)  # fmt: skip
FIELDS = GAUGES + COUNTERS


def latest_key(instance: str) -> str:
    return LATEST_PREFIX + instance


def series_key(instance: str) -> str:
    return SERIES_PREFIX + instance


def adapters_key(instance: str) -> str:
    return ADAPTERS_PREFIX + instance


def encode_adapters(adapters: frozenset[str]) -> str:
    return json.dumps(sorted(adapters))


def decode_adapters(raw: str | bytes | None) -> frozenset[str]:
    """The adapters of a kept list; none for a missing or malformed one (never raises)."""
    try:
        data = json.loads(raw) if raw is not None else []
    except (ValueError, UnicodeDecodeError):
        return frozenset()
    if not isinstance(data, list):
        return frozenset()
    return frozenset(a for a in data if isinstance(a, str))


def encode(sample: dict[str, float]) -> str:
    """A sample's JSON: "at" and the known fields that are finite numbers."""
    kept = {k: sample[k] for k in ("at", *FIELDS) if _number(sample.get(k))}
    return json.dumps(kept)


def decode(raw: str | bytes | None) -> dict[str, float] | None:
    """A sample, or None for a missing or malformed one (never raises)."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not _number(data.get("at")):
        return None
    return {k: float(data[k]) for k in ("at", *FIELDS) if _number(data.get(k))}


def rates(newer: dict[str, float], older: dict[str, float]) -> dict[str, float]:
    """What happened between two samples of one engine: prefix-cache hit rate (0..1), mean
    time to first token (s), mean inter-token latency (s), prompt and generation tokens/s,
    speculative acceptance (0..1).
    A rate whose counters went backwards (the engine restarted) or did not move is left out."""
    span = newer["at"] - older["at"]
    delta = {k: newer[k] - older[k] for k in COUNTERS if k in newer and k in older}
    out: dict[str, float] = {}
    if any(v < 0 for v in delta.values()) or span <= 0:
        return out
    if delta.get("prefix_queries", 0) > 0:
        out["prefix_hit_rate"] = delta.get("prefix_hits", 0) / delta["prefix_queries"]
    if delta.get("ttft_count", 0) > 0:
        out["ttft"] = delta.get("ttft_sum", 0) / delta["ttft_count"]
    if delta.get("itl_count", 0) > 0:
        out["itl"] = delta.get("itl_sum", 0) / delta["itl_count"]
    for counter, rate in (("prompt_tokens", "prompt_tps"), ("generation_tokens", "generation_tps")):
        if counter in delta:
            out[rate] = delta[counter] / span
    if delta.get("spec_draft_tokens", 0) > 0:
        out["spec_acceptance"] = delta.get("spec_accepted_tokens", 0) / delta["spec_draft_tokens"]
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
