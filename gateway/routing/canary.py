"""A canary release at the gateway: the service's calls split between its stable instances
and its canary's ("track": "canary") by the canary's weight, exactly per gateway (smooth
weighted round robin), and each call's figures recorded on its track (contracts.call_figures)
so the control plane can judge the two side by side (contracts.canary).

A track with no ready instance takes none of the calls: the other serves them all.
"""

from __future__ import annotations

from dataclasses import replace

from contracts.canary import CANARY_TRACK as CANARY
from contracts.routing import RoutedService
from contracts.service_groups import SmoothRoundRobin

STABLE = ""


class TrackSplit:
    """One gateway process's turns, per service in a canary release."""

    def __init__(self) -> None:
        self._turns: dict[str, SmoothRoundRobin] = {}

    def track(self, service: RoutedService) -> tuple[RoutedService, str]:
        """The service narrowed to the instances of the track this call goes to, and the
        track; a service without canary instances is returned as it is."""
        canary = tuple(i for i in service.instances if i.track == CANARY)
        if not canary:
            return service, STABLE
        stable = tuple(i for i in service.instances if i.track != CANARY)
        weight = max(0, min(service.canary_weight, 100))
        weights = {CANARY: weight if canary else 0, "stable": 100 - weight if stable else 0}
        if not any(weights.values()):  # weight 0 with no stable instance: the canary serves
            weights[CANARY] = 1
        chosen = self._turns.setdefault(service.name, SmoothRoundRobin()).pick(weights)
        if chosen == CANARY:
            return replace(service, instances=canary), CANARY
        return replace(service, instances=stable), STABLE

    def loaded(self, services: dict[str, RoutedService]) -> None:
        """Forget the turns of services no longer in a canary release."""
        for name in list(self._turns):
            found = services.get(name)
            if found is None or not any(i.track == CANARY for i in found.instances):
                del self._turns[name]
