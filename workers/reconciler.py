"""Reconcile one service: observe the runtime, plan (workers.planning), apply, record status.

Idempotent and level-triggered: run it any number of times, from any worker, after any
crash; it converges on the spec. It returns True while the service is still moving (the
task then runs it again shortly) and False once it has settled.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_snapshot
from controlplane.services.spec import SpecError
from workers import planning
from workers.engines import render
from workers.health import is_healthy
from workers.runtimes import InstanceError, InstanceRequest, ObservedInstance, Runtime

log = logging.getLogger(__name__)

# Events that mark a fresh user intent; exits before the latest of them are forgiven.
INTENT_REASONS = ("Created", "Updated", "StartRequested")


def reconcile(name: str, runtime: Runtime) -> bool:
    service = Service.objects.filter(name=name).first()
    if service is None:
        for orphan in runtime.list(service=name):
            runtime.remove(orphan.name)
        return False
    observed = runtime.list(service=name)
    ready = {o.name for o in observed if o.running and o.url and is_healthy(o.url, o.health_path)}
    observed = [_expire_if_stuck(service, o, ready) for o in observed]
    desired, spec, error = _desired(service)
    result = planning.plan(name, desired, observed)

    for instance in result.remove:
        _remove(service, runtime, instance)
    created: list[ObservedInstance] = []
    for instance_name in result.create:
        try:
            plan = render(spec, runtime.placement())
            request = InstanceRequest(name, instance_name, desired.spec_hash, plan)
            created.append(runtime.create(request))
            record(service, "InstanceCreated", f"instance created on {runtime.name}", instance_name)
        except InstanceError as exc:
            error = str(exc)
            record(service, "InstanceFailed", error, instance_name)
            break

    live = result.keep + created
    ready &= {o.name for o in live}
    _sync_instances(service, runtime, live, ready)
    settled = _write_status(service, desired, len(ready), len(live), error)
    if service.desired_state == DesiredState.DELETED and not live:
        record(service, "Deleted", "every instance removed; service deleted")
        service.delete()
    publish_snapshot()
    return not settled


def _expire_if_stuck(service: Service, observed: ObservedInstance, ready: set[str]):
    """An instance still not ready after WHARF_HEALTH_TIMEOUT counts as exited."""
    if not observed.running or observed.name in ready:
        return observed
    row = service.instances.filter(name=observed.name).first()
    if (
        row is None
        or (timezone.now() - row.created_at).total_seconds() < settings.WHARF_HEALTH_TIMEOUT
    ):
        return observed
    return replace(observed, running=False, stuck=True)


def _desired(service: Service):
    """Replicas and spec hash to converge on, and an error that forbids creating instances."""
    if service.desired_state != DesiredState.RUNNING:
        return planning.Desired(replicas=0, spec_hash=""), None, None
    try:
        spec = service.parsed_spec()
    except SpecError as exc:  # stored before a validation rule tightened
        return planning.Desired(0, "", allow_create=False), None, f"invalid spec: {exc}"
    exits = _exits_since_intent(service)
    error = None
    if exits >= planning.MAX_EXITS:
        error = f"instances exited {exits} times; fix the spec and update or start the service"
    desired = planning.Desired(spec.metadata.instance, spec.spec_hash(), error is None)
    return desired, spec, error


def _exits_since_intent(service: Service) -> int:
    intent = service.events.filter(reason__in=INTENT_REASONS).order_by("-id").first()
    exits = service.events.filter(reason__in=("InstanceExited", "InstanceFailed"))
    if intent:
        exits = exits.filter(id__gt=intent.id)
    return exits.count()


def _remove(service: Service, runtime: Runtime, instance: ObservedInstance) -> None:
    if instance.stuck:
        timeout = settings.WHARF_HEALTH_TIMEOUT
        record(
            service, "InstanceExited", f"not ready within {timeout} s; replacing it", instance.name
        )
    elif not instance.running:
        tail = runtime.logs(instance.name, tail=15).strip()
        code = "" if instance.exit_code is None else f" with code {instance.exit_code}"
        message = f"instance exited{code}" + (f"; last log lines:\n{tail}" if tail else "")
        record(service, "InstanceExited", message, instance.name)
    runtime.remove(instance.name)
    if instance.running:
        record(service, "InstanceRemoved", "instance removed", instance.name)


def _sync_instances(service, runtime, live, ready) -> None:
    """Mirror the runtime into Instance rows, with an event on every state change."""
    rows = {i.name: i for i in service.instances.all()}
    for observed in live:
        state = InstanceState.READY if observed.name in ready else InstanceState.STARTING
        row = rows.pop(observed.name, None)
        if row is None:
            Instance.objects.create(
                service=service, name=observed.name, runtime=runtime.name,
                node=settings.WHARF_NODE_ADDRESS, spec_hash=observed.spec_hash,
                state=state, url=observed.url or "",
            )  # fmt: skip
        elif row.state != state or row.url != (observed.url or ""):
            Instance.objects.filter(pk=row.pk).update(state=state, url=observed.url or "")
        else:
            continue
        if state == InstanceState.READY:
            record(
                service, "InstanceReady", f"health check passed at {observed.url}", observed.name
            )
        elif row is not None and row.state == InstanceState.READY:
            record(service, "InstanceUnhealthy", "health check failing", observed.name)
    Instance.objects.filter(pk__in=[r.pk for r in rows.values()]).delete()


def _write_status(service: Service, desired, ready: int, live: int, error: str | None) -> bool:
    """Write the observed status if the spec has not changed meanwhile; True when settled."""
    status = planning.status(
        service.desired_state, desired.replicas, ready, live, service.phase, failed=bool(error)
    )
    with transaction.atomic():
        updated = Service.objects.filter(pk=service.pk, generation=service.generation).update(
            phase=status.phase,
            progress=status.progress,
            ready_instances=ready,
            observed_generation=service.generation,
            last_error=error or "",
        )
        if updated and status.phase != service.phase:
            record(service, status.phase.capitalize(), status.progress)
    if error and error != service.last_error:
        log.warning("service %s failed: %s", service.name, error)
    return status.phase in ("running", "stopped", "failed", "degraded")
