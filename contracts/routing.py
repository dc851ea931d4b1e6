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
          ]
        }
      }
    }
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

SNAPSHOT_KEY = "wharf:routing:snapshot"
SNAPSHOT_CHANNEL = "wharf:routing:changed"


@dataclass(frozen=True)
class RoutedInstance:
    name: str
    url: str


@dataclass(frozen=True)
class RoutedService:
    name: str
    served_model_names: tuple[str, ...] = ()
    token_digests: frozenset[str] = frozenset()
    instances: tuple[RoutedInstance, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    version: int = 0
    services: dict[str, RoutedService] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "services": {
                    name: {
                        "served_model_names": list(svc.served_model_names),
                        "token_digests": sorted(svc.token_digests),
                        "instances": [{"name": i.name, "url": i.url} for i in svc.instances],
                    }
                    for name, svc in sorted(self.services.items())
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
                    RoutedInstance(name=i["name"], url=i["url"]) for i in svc.get("instances", ())
                ),
            )
            for name, svc in data.get("services", {}).items()
        }
        return cls(version=int(data.get("version", 0)), services=services)

    def find_by_model(self, model: str) -> RoutedService | None:
        """The service a `model` value names: its service name first, else a served model name."""
        if model in self.services:
            return self.services[model]
        for svc in self.services.values():
            if model in svc.served_model_names:
                return svc
        return None
