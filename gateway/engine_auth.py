"""The engine key the gateway presents to each instance (contracts.engine_keys).

Engines Wharf starts refuse their OpenAI routes without their instance's key, so every call
the gateway forwards (the plain relay, and both legs of prefill/decode routing) carries
`Authorization: Bearer <key>`; the caller's own Authorization, their Wharf token, is never
forwarded (gateway.relay.proxy drops it). Keys are derived when a snapshot loads, not per request.
"""

from __future__ import annotations

from contracts.engine_keys import engine_key
from contracts.routing import RoutedInstance, Snapshot

Header = tuple[str, str]


class EngineKeys:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._headers: dict[str, Header] = {}

    def load(self, snapshot: Snapshot) -> None:
        """Key the snapshot's instances, keeping those already derived; forget the rest."""
        known = self._headers
        self._headers = {
            instance.name: known.get(instance.name) or self._header(instance.key or instance.name)
            for service in snapshot.services.values()
            for instance in service.instances
        }

    def authorization(self, instance: RoutedInstance) -> Header:
        """The header to send `instance`; derived on the spot for one the snapshot lacks."""
        header = self._headers.get(instance.name)
        return header if header is not None else self._header(instance.key or instance.name)

    def _header(self, key_name: str) -> Header:
        return ("authorization", f"Bearer {engine_key(self._secret, key_name)}")
