"""The reconciler's pure core: what to create and remove, and what phase that means.

A service's instances have a role: "" for an ordinary service, "prefill" and "decode" for a
prefill/decode-separated one. Each role is planned on its own, so scaling one role leaves
the other alone.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from workers.runtimes.base import ObservedInstance

# After this many exits since the last user action, stop recreating and mark the service failed.
MAX_EXITS = 5


@dataclass(frozen=True)
class Desired:
    replicas: dict[str, int]  # role -> instances
    spec_hash: str
    allow_create: bool = True

    @property
    def total(self) -> int:
        return sum(self.replicas.values())


@dataclass(frozen=True)
class Plan:
    keep: list[ObservedInstance] = field(default_factory=list)
    remove: list[ObservedInstance] = field(default_factory=list)
    create: list[tuple[str, str]] = field(default_factory=list)  # (role, instance name)


def instance_name(service: str, role: str = "") -> str:
    infix = f"{role[0]}-" if role else ""  # svc-p-1a2b3c, svc-d-4d5e6f
    return f"{service}-{infix}{secrets.token_hex(3)}"


def plan(service: str, desired: Desired, observed: list[ObservedInstance]) -> Plan:
    """Level-triggered: compare what runs with what should, regardless of how we got here.
    Instances of a role the spec no longer has are removed like any surplus."""
    keep: list[ObservedInstance] = []
    create: list[tuple[str, str]] = []
    for role, replicas in desired.replicas.items():
        current = sorted(
            (o for o in observed
             if o.role == role and o.running and o.spec_hash == desired.spec_hash),
            key=lambda o: o.name,
        )  # fmt: skip
        kept = current[:replicas]
        keep += kept
        if desired.allow_create:
            create += [(role, instance_name(service, role)) for _ in range(replicas - len(kept))]
    kept_names = {o.name for o in keep}
    remove = [o for o in observed if o.name not in kept_names]
    return Plan(keep=keep, remove=remove, create=create)


@dataclass(frozen=True)
class Status:
    phase: str
    progress: str


def _counts(replicas: dict[str, int], ready: dict[str, int]) -> str:
    if list(replicas) == [""]:
        return f"{ready.get('', 0)}/{replicas['']} instances ready"
    return ", ".join(f"{role} {ready.get(role, 0)}/{n} ready" for role, n in replicas.items())


def status(
    desired_state: str,
    replicas: dict[str, int],
    ready: dict[str, int],
    running: int,
    previous_phase: str,
    failed: bool,
    waiting: str | None = None,
) -> Status:
    """The service phase from counts alone, so it can be recomputed on any pass.

    An ordinary service is running when every replica is ready. A prefill/decode service is
    running as soon as each role has a ready instance (requests need one of each, as the
    seeds' scheduler does), and degraded when a role has none.
    """
    if desired_state == "deleted":
        return Status("deleting", f"removing {running} instance(s)")
    if desired_state == "stopped":
        if running:
            return Status("stopping", f"removing {running} instance(s)")
        return Status("stopped", "stopped")
    counts = _counts(replicas, ready)
    complete = all(ready.get(role, 0) >= n for role, n in replicas.items())
    if list(replicas) == [""]:
        serving = complete
    else:
        serving = all(ready.get(role, 0) >= 1 for role, n in replicas.items() if n)
    if failed:
        return Status("failed", counts)
    if waiting and not complete:
        return Status("pending", f"{counts}; waiting: {waiting}")
    if serving:
        return Status("running", counts)
    if previous_phase in ("running", "degraded"):
        missing = [role for role in replicas if role and not ready.get(role, 0)]
        why = f"; no ready {' or '.join(missing)} instance" if missing else ""
        return Status("degraded", counts + why)
    if previous_phase == "updating":
        return Status("updating", counts)
    return Status("deploying", f"{counts}; waiting for the engine's health check")
