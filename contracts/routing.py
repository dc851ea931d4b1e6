"""The routing snapshot the control plane publishes to Redis for the gateway.

Redis layout:
- key ``SNAPSHOT_KEY`` holds the JSON of the whole snapshot (small: one entry per
  service), rewritten by the control plane after every change it makes;
- channel ``SNAPSHOT_CHANNEL`` receives the snapshot's ``version`` after each write,
  so gateways reload at once instead of waiting for their next poll.

Snapshot JSON::

    {
      "version": 17,                      # increases with every publish
      "services": {
        "<service name>": {
          "served_model_names": ["tiny"],  # OpenAI `model` values that reach it
          "token_digests": ["<hex>"],      # contracts.tokens.token_digest of each valid token
          "instances": [                   # only instances that passed their health check
            {"name": "<instance name>", "url": "http://127.0.0.1:32768"}
          ],
          "rate_limit": 100,               # requests/s for the whole service (metadata.rpc)
          "max_queue_size": 64,            # requests waiting per instance; null: no bound
          "timeout": 600.0                 # seconds per request (metadata.rpc.keepalive); null
        }
      },
      "keys": {                            # API keys, by token digest
        "<hex digest>": {
          "id": "k7",                      # public id: usage and limit counters use it
          "services": ["qwen"],            # null: every service
          "expires_at": 1795000000.0,      # epoch seconds; null: never
          "rpm": 600, "tpm": 100000, "max_concurrency": 8   # null: unlimited
        }
      }
    }
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

SNAPSHOT_KEY = "wharf:routing:snapshot"
SNAPSHOT_CHANNEL = "wharf:routing:changed"


@dataclass(frozen=True)
class RoutedInstance:
    name: str
    url: str
    role: str = ""  # "prefill" | "decode" in a prefill/decode-separated service


@dataclass(frozen=True)
class PdRouting:
    """How the gateway routes a prefill/decode-separated service: prefill first (max_tokens=1),
    then decode, streamed back."""

    connector: str
    prefill_policy: str = "least_outstanding"  # | "round_robin"
    decode_policy: str = "least_outstanding"
    on_prefill_failure: str = "fail"  # | "decode_only"
    # What the connector needs of the router (workers.engines.pd.router_hints), e.g.
    # {"kv_transfer_params": true} or {"request_id": "p2p_nccl"}.
    hints: dict = field(default_factory=dict)


DEFAULT_RATE_LIMIT = 100  # requests/s per service, as ModelArts defaults


@dataclass(frozen=True)
class RoutedService:
    name: str
    served_model_names: tuple[str, ...] = ()
    token_digests: frozenset[str] = frozenset()
    instances: tuple[RoutedInstance, ...] = ()
    rate_limit: int = DEFAULT_RATE_LIMIT
    max_queue_size: int | None = None
    timeout: float | None = None
    pd: PdRouting | None = None


@dataclass(frozen=True)
class RoutedKey:
    """An API key: which services it may call, until when, and its own limits."""

    id: str
    services: frozenset[str] | None = None
    expires_at: float | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None

    def allows(self, service: str, now: float) -> bool:
        unexpired = self.expires_at is None or now < self.expires_at
        return unexpired and (self.services is None or service in self.services)


@dataclass(frozen=True)
class Snapshot:
    version: int = 0
    services: dict[str, RoutedService] = field(default_factory=dict)
    keys: dict[str, RoutedKey] = field(default_factory=dict)  # by token digest

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "services": {
                    name: {
                        "served_model_names": list(svc.served_model_names),
                        "token_digests": sorted(svc.token_digests),
                        "instances": [
                            {"name": i.name, "url": i.url, "role": i.role} for i in svc.instances
                        ],
                        "rate_limit": svc.rate_limit,
                        "max_queue_size": svc.max_queue_size,
                        "timeout": svc.timeout,
                        "pd": None if svc.pd is None else asdict(svc.pd),
                    }
                    for name, svc in sorted(self.services.items())
                },
                "keys": {
                    digest: {
                        "id": key.id,
                        "services": None if key.services is None else sorted(key.services),
                        "expires_at": key.expires_at,
                        "rpm": key.rpm,
                        "tpm": key.tpm,
                        "max_concurrency": key.max_concurrency,
                    }
                    for digest, key in sorted(self.keys.items())
                },
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Snapshot:
        data = json.loads(text)
        services = {
            name: RoutedService(
                name=name,
                served_model_names=tuple(svc.get("served_model_names", ())),
                token_digests=frozenset(svc.get("token_digests", ())),
                instances=tuple(
                    RoutedInstance(name=i["name"], url=i["url"], role=i.get("role", ""))
                    for i in svc.get("instances", ())
                ),
                rate_limit=int(svc.get("rate_limit", DEFAULT_RATE_LIMIT)),
                max_queue_size=svc.get("max_queue_size"),
                timeout=svc.get("timeout"),
                pd=PdRouting(**svc["pd"]) if svc.get("pd") else None,
            )
            for name, svc in data.get("services", {}).items()
        }
        keys = {
            digest: RoutedKey(
                id=str(key["id"]),
                services=None if key.get("services") is None else frozenset(key["services"]),
                expires_at=key.get("expires_at"),
                rpm=key.get("rpm"),
                tpm=key.get("tpm"),
                max_concurrency=key.get("max_concurrency"),
            )
            for digest, key in data.get("keys", {}).items()
        }
        return cls(version=int(data.get("version", 0)), services=services, keys=keys)

    def find_by_model(self, model: str) -> RoutedService | None:
        """The service a `model` value names: its service name first, else a served model name."""
        if model in self.services:
            return self.services[model]
        for svc in self.services.values():
            if model in svc.served_model_names:
                return svc
        return None
