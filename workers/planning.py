"""The reconciler's pure core: what to create and remove, and what phase that means."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from workers.runtimes.base import ObservedInstance

# After this many exits since the last user action, stop recreating and mark the service failed.
MAX_EXITS = 5


@dataclass(frozen=True)
class Desired:
    replicas: int
    spec_hash: str
    allow_create: bool = True


@dataclass(frozen=True)
class Plan:
    keep: list[ObservedInstance] = field(default_factory=list)
    remove: list[ObservedInstance] = field(default_factory=list)
    create: list[str] = field(default_factory=list)


def instance_name(service: str) -> str:
    return f"{service}-{secrets.token_hex(3)}"


def plan(service: str, desired: Desired, observed: list[ObservedInstance]) -> Plan:
    """Level-triggered: compare what runs with what should, regardless of how we got here."""
    current = sorted(
        (o for o in observed if o.running and o.spec_hash == desired.spec_hash),
        key=lambda o: o.name,
    )
    keep = current[: desired.replicas]
    kept = {o.name for o in keep}
    remove = [o for o in observed if o.name not in kept]
    missing = desired.replicas - len(keep) if desired.allow_create else 0
    return Plan(keep=keep, remove=remove, create=[instance_name(service) for _ in range(missing)])


@dataclass(frozen=True)
class Status:
    phase: str
    progress: str


def status(
    desired_state: str,
    replicas: int,
    ready: int,
    running: int,
    previous_phase: str,
    failed: bool,
    waiting: str | None = None,
) -> Status:
    """The service phase from counts alone, so it can be recomputed on any pass."""
    if desired_state == "deleted":
        return Status("deleting", f"removing {running} instance(s)")
    if desired_state == "stopped":
        if running:
            return Status("stopping", f"removing {running} instance(s)")
        return Status("stopped", "stopped")
    counts = f"{ready}/{replicas} instances ready"
    if failed:
        return Status("failed", counts)
    if waiting and ready < replicas:
        return Status("pending", f"{counts}; waiting: {waiting}")
    if ready >= replicas:
        return Status("running", counts)
    if previous_phase in ("running", "degraded") and ready < replicas:
        return Status("degraded", counts)
    if previous_phase == "updating":
        return Status("updating", counts)
    return Status("deploying", f"{counts}; waiting for the engine's health check")
