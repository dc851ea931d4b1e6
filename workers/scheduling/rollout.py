"""The rollout planner: one step of converging a role's instances on its spec, as EAS and a
Kubernetes Deployment do it. Pure: the scheduler feeds it the rows and acts on the step.

New instances come first: at most `surge` above the replica count, and an old instance is
drained only while at least `replicas - unavailable` instances stay ready. Old instances that
serve nothing (starting, unhealthy, in back-off, on a dead node) go at once: they count for
nothing. A new instance that fails (exits, misses its readiness deadline, cannot start) pauses
the rollout: nothing more is created or drained and the old instances keep serving, until it
recovers or the user rolls back or updates again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

READY = "ready"
DRAINING = "draining"


@dataclass(frozen=True)
class Member:
    """One instance of a role, as the planner sees it."""

    name: str
    spec_hash: str
    state: str
    movable: bool = False  # on a draining node: replaced like an old one
    failing: str = ""  # why it fails (an exit, a missed deadline), "" while it does not

    @property
    def ready(self) -> bool:
        return self.state == READY


@dataclass(frozen=True)
class Step:
    create: int = 0
    drain: tuple[str, ...] = ()
    paused: str = ""  # why the rollout waits, "" while it moves


def step(
    replicas: int, target: str, members: Sequence[Member], surge: int = 1, unavailable: int = 0
) -> Step:
    """What to do now so that `replicas` instances of spec `target` serve, never dropping
    below `replicas - unavailable` ready ones on the way."""
    active = [m for m in members if m.state != DRAINING]
    current = [m for m in active if m.spec_hash == target and not m.movable]
    old = [m for m in active if m.spec_hash != target or m.movable]
    drain = [m.name for m in old if not m.ready]
    old_ready = sorted((m for m in old if m.ready), key=lambda m: (not m.movable, m.name))
    if len(current) > replicas:  # scale-down: keep the ready ones
        current.sort(key=lambda m: (not m.ready, bool(m.failing), m.name))
        drain += [m.name for m in current[replicas:]]
        current = current[:replicas]
    failing = [m for m in current if m.failing]
    paused = f"{failing[0].name}: {failing[0].failing}" if failing and old_ready else ""

    create = 0
    if not paused:
        create = max(
            0, min(replicas - len(current), replicas + surge - len(current) - len(old_ready))
        )
    ready_now = sum(m.ready for m in current)
    spare = ready_now + len(old_ready) - max(replicas - unavailable, 0)
    if paused and ready_now < replicas:
        spare = 0  # hold every old instance that serves while the new version fails
    drain += [m.name for m in old_ready[: max(spare, 0)]]
    return Step(create=create, drain=tuple(drain), paused=paused)
