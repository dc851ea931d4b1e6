"""Prefill/decode routing: the gateway is the scheduler of a separated service.

A request goes to a prefill instance first, as a one-token, non-streaming completion that
fills the KV cache; then the original request goes to a decode instance, which continues from
that cache (through the connector named in the snapshot) and streams the answer back. Only
decode's answer reaches the client, so usage is counted once.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass
from typing import Any

from contracts.routing import PdRouting, RoutedInstance

# Fields that would make the prefill leg do more than fill the cache.
_PREFILL_DROPS = ("stream_options", "n", "best_of", "logprobs", "top_logprobs", "echo")


def prefill_body(data: dict[str, Any], pd: PdRouting) -> dict[str, Any]:
    """The prefill leg: one token, not streamed, asking the connector to keep the KV cache for
    a remote decode when the connector works that way (Nixl, Mooncake)."""
    body = {k: v for k, v in data.items() if k not in _PREFILL_DROPS}
    body["max_tokens"] = 1
    if "max_completion_tokens" in body:
        body["max_completion_tokens"] = 1
    body["stream"] = False
    params = pd.hints.get("prefill_kv_transfer_params")
    if pd.hints.get("kv_transfer_params") and params is not None:
        body["kv_transfer_params"] = copy.deepcopy(params)
    return body


def decode_body(
    data: dict[str, Any], pd: PdRouting, prefill_answer: dict[str, Any] | None
) -> dict[str, Any]:
    """The decode leg: the original request, plus the transfer parameters prefill returned."""
    if not pd.hints.get("kv_transfer_params") or not prefill_answer:
        return data
    params = prefill_answer.get("kv_transfer_params")
    return {**data, "kv_transfer_params": params} if params else data


def request_id(pd: PdRouting) -> str | None:
    """One id for both legs, for connectors that pair them by request id."""
    if pd.hints.get("request_id") or pd.hints.get("transfer_id"):
        return f"wharf-{uuid.uuid4().hex}"
    return None


def by_role(instances: tuple[RoutedInstance, ...], role: str) -> tuple[RoutedInstance, ...]:
    return tuple(i for i in instances if i.role == role)


@dataclass(frozen=True)
class PrefillLeg:
    """What the proxy needs for the prefill leg of one request."""

    pd: PdRouting
    instances: tuple[RoutedInstance, ...]  # the service's ready prefill instances
    data: dict[str, Any]  # the client's request, parsed


def with_transfer_params(body: bytes, pd: PdRouting, prefill_answer: dict[str, Any]) -> bytes:
    """The decode body: unchanged unless the connector hands parameters from prefill over."""
    data = json.loads(body)
    decoded = decode_body(data, pd, prefill_answer)
    return body if decoded is data else json.dumps(decoded).encode()
