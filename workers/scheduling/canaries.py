"""The canary controller: every INTERVAL seconds, on whichever worker holds the lease, each
active canary release (controlplane.services.models.Canary) is moved on by what
contracts.canary.judge says of the gateways' figures of both sides (contracts.call_figures):

- starting: once every canary instance is ready, its first step's weight is set (running);
  a canary instance that cannot start rolls the release back;
- running: rollback (its weight 0 at once, its instances drained by the scheduler, the
  stable side serving on), the next step, promotion (the canary's spec becomes the service's
  as a new version, its instances the stable ones, the old ones drained), or hold;
- paused: nothing, until resumed.

Each step and decision is an event of the service and an entry of the audit trail; the
gateways learn a new weight from the snapshot published at once.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from contracts import canary as canaries
from contracts import spec_facts
from contracts.spec import SpecError
from controlplane.services.canaries import bounds, finish, note, promote
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.figures import read_figures
from controlplane.services.models import Canary, Instance
from controlplane.services.routing import publish_snapshot
from workers.locks import LeasedPasses

log = logging.getLogger(__name__)
INTERVAL = 2.0
LOCK = "wharf:canaries"


def advance_all(now: datetime | None = None) -> set[str]:
    """One pass over every active canary; the services whose instances must move."""
    now = now or timezone.now()
    moved = set()
    active = Canary.objects.filter(state__in=canaries.ACTIVE)
    for pk in active.values_list("pk", flat=True):
        with transaction.atomic():
            # Locked and read afresh: a hand's pause, promote or abort made meanwhile wins.
            locked = active.select_for_update(of=("self",)).filter(pk=pk)
            release = locked.select_related("service", "service__workspace").first()
            if release is not None and _advance(release, now):
                moved.add(release.service.name)
    return moved


def _advance(release: Canary, now: datetime) -> bool:
    service = release.service
    if service.desired_state != DesiredState.RUNNING:
        finish(release, canaries.ABORTED, f"the service is {service.desired_state}")
        return True
    if release.state == canaries.STARTING:
        return _start(release, now)
    if release.state != canaries.RUNNING:
        return False
    started = (release.step_started_at or now).timestamp()
    try:
        canary = read_figures(service.name, canaries.CANARY_TRACK, started, now.timestamp())
        stable = read_figures(service.name, "", started, now.timestamp())
    except RedisError as exc:
        release.message = f"figures unavailable: {exc}"
        release.save(update_fields=["message", "updated_at"])
        return False
    elapsed = (now - release.step_started_at).total_seconds() if release.step_started_at else 0
    verdict = canaries.judge(canary, stable, bounds(release), elapsed, release.interval_s,
                             release.steps, release.step)  # fmt: skip
    release.figures = {"canary": canary, "stable": stable}
    release.message = verdict.why
    if verdict.action == canaries.ROLLBACK:
        finish(release, canaries.ROLLED_BACK, verdict.why)
        return True
    if verdict.action == canaries.PROMOTE:
        promote(release, verdict.why)
        return True
    if verdict.action == canaries.ADVANCE:
        release.step += 1
        release.step_started_at = now
        release.save()
        note(release, "CanaryStep", f"{release.weight}% of calls to the canary: {verdict.why}")
        transaction.on_commit(publish_snapshot, robust=True)
        return False
    release.save(update_fields=["figures", "message", "updated_at"])
    return False


def _start(release: Canary, now: datetime) -> bool:
    rows = list(Instance.objects.filter(service=release.service, track=canaries.CANARY_TRACK))
    failing = [r for r in rows if r.state in (InstanceState.FAILED, InstanceState.BACKOFF)]
    if failing:
        why = f"the new version does not start: {failing[0].name}: {failing[0].message}"
        finish(release, canaries.ROLLED_BACK, why)
        return True
    wanted = _stable_count(release.service) or len(rows) or 1
    ready = [r for r in rows if r.state == InstanceState.READY]
    if len(ready) < wanted:
        release.message = f"starting: {len(ready)} of {wanted} canary instances ready"
        release.save(update_fields=["message", "updated_at"])
        return False
    release.state, release.step_started_at = canaries.RUNNING, now
    release.message = f"{release.weight}% of calls to the canary"
    release.save()
    note(release, "CanaryStep", f"{release.weight}% of calls to the canary; judged every "
         f"{release.interval_s} s")  # fmt: skip
    transaction.on_commit(publish_snapshot, robust=True)
    return False


def _stable_count(service) -> int:
    """The instances the stable side wants, every role: as many canary ones start."""
    try:
        return sum(spec_facts.replicas(service.parsed_spec(), service.autoscale).values())
    except SpecError:
        return 0


class CanaryController(LeasedPasses):
    """Every worker runs one; the lease makes one pass at a time happen fleet-wide."""

    def __init__(self, interval: float = INTERVAL) -> None:
        super().__init__("wharf-canaries", LOCK, interval, advance_all)
