"""An API key's `rpm` and `tpm` hold its batch requests back, as they limit its online calls:
before the feeder sends a leased batch request to an instance it is admitted by the same
limiter (gateway.limits.admission, counted in Redis across gateways with the key's online calls),
its tokens estimated as an online call's (a quarter of the body's bytes + its max_tokens) and
replaced by the answer's usage when it ends. A refused one goes back to the store undelivered,
and the key is *held* until the limiter's retry hint: the feeder's next leases skip its batch
requests (controlplane.queues.store.lease), so other keys' requests behind them run meanwhile.
A request larger than the key's whole tpm never fits: it is answered with the limiter's 429.

Only batch requests (OpenAI's Batch API counts them on the key): an Async service's items are
bounded by its queue's settings and the workspace's queued_items quota, not by a key's rpm/tpm.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from typing import Any

from contracts.engine_routes import GENERATION, POOLING
from contracts.routing import RoutedKey, Snapshot
from gateway.limits.admission import Admission, Limiter
from gateway.limits.rules import Demand, Refusal
from gateway.relay.body import completion_budget

DEFAULT_HOLD_S = 1.0  # a refusal without a retry hint (it has one but for TOO_LARGE)


@dataclass(frozen=True)
class Refused:
    """A batch request the key's limits refused now: `refusal.retryable` says whether it
    waits for the key (given back) or never fits (answered with the refusal)."""

    refusal: Refusal


def batch_demand(service: str, key: RoutedKey, item: dict[str, Any]) -> Demand:
    """What a leased batch request asks of its key's rpm and tpm (nothing else: the service's
    and the instances' limits are the feeder's windows)."""
    try:
        raw = base64.b64decode(item.get("data", ""))
    except binascii.Error:
        raw = b""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    path = str(item.get("path") or "")
    kind = POOLING if path.rstrip("/").endswith("embeddings") else GENERATION
    data = body if isinstance(body, dict) else None
    budget = completion_budget(data, kind) if kind == GENERATION else 0
    return Demand(
        service, key_id=key.id, rpm=key.rpm or 0, tpm=key.tpm or 0, tokens=len(raw) // 4 + budget
    )


def hold_s(refusal: Refusal) -> float:
    """How long a refused key's batch requests wait: the limiter's hint (retry-after-ms)."""
    try:
        return max(int(refusal.headers["retry-after-ms"]) / 1000, 0.05)
    except (KeyError, ValueError):
        return DEFAULT_HOLD_S


class KeyHolds:
    """The keys whose batch requests wait for their rpm/tpm, in one gateway's feeder."""

    def __init__(self, limiter: Limiter) -> None:
        self._limiter = limiter
        self._keys: dict[str, RoutedKey] = {}  # by id: those with an rpm or a tpm
        self._until: dict[str, float] = {}  # key id -> monotonic time its hold ends

    def seen(self, snapshot: Snapshot) -> None:
        self._keys = {k.id: k for k in snapshot.keys.values() if k.rpm or k.tpm}

    def held(self) -> list[str]:
        """The keys held now (those whose hold ended are forgotten)."""
        now = time.monotonic()
        self._until = {key: until for key, until in self._until.items() if until > now}
        return sorted(self._until)

    async def admit(self, service: str, item: dict[str, Any]) -> Admission | Refused | None:
        """The item's admission against its key's rpm/tpm (release it when it ends), Refused,
        or None when no such limit applies (not a batch request, or a key without them)."""
        key = self._keys.get(str(item.get("key_id") or ""))
        if not item.get("batch") or key is None:
            return None
        if key.id in self.held():
            return Refused(_held_refusal(key))
        admission = await self._limiter.admit(batch_demand(service, key, item))
        if admission.refusal is None:
            return admission
        if admission.refusal.retryable:
            self._until[key.id] = time.monotonic() + hold_s(admission.refusal)
        return Refused(admission.refusal)

    def release(self, admission: Admission | Refused | None, tokens: int | None) -> None:
        """The request ended: its tokens (the answer's usage; 0 when it did not run) replace
        the estimate in the key's tpm."""
        if isinstance(admission, Admission):
            self._limiter.release(admission, tokens)


def _held_refusal(key: RoutedKey) -> Refusal:
    return Refusal("key_held", "requests", f"API key '{key.id}' is at its rpm or tpm", {})
