"""Reconcile one service: observe the runtime, plan (workers.planning), apply, record status.

Idempotent and level-triggered: run it any number of times, from any worker, after any
crash; it converges on the spec. It returns True while the service is still moving (the
task then runs it again shortly) and False once it has settled.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contracts.engine_keys import engine_key
from controlplane.nodes.models import Node
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_snapshot
from controlplane.services.spec import SpecError
from controlplane.tokens.models import ApiKey
from workers import devices, planning, provisioning, sizing
from workers.engines import render
from workers.health import is_healthy
from workers.locks import node_lock
from workers.runtimes import InstanceError, InstanceRequest, ObservedInstance, Runtime

log = logging.getLogger(__name__)

# Cards change rarely and nvidia-smi is slow; a short-lived cache per worker process.
CARDS = devices.DeviceCache()

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
    node = Node.objects.filter(name=settings.WHARF_NODE_NAME).first()
    result, waiting = _respect_node_marks(node, planning.plan(name, desired, observed))

    for instance in result.remove:
        _remove(service, runtime, instance)
    created: list[ObservedInstance] = []
    for role, instance_name in result.create:
        try:
            taken = {o.pd_index for o in result.keep + created if o.role == role}
            slot = (role, min(set(range(len(taken) + 1)) - taken))  # the lowest free number
            created.append(_create(service, runtime, spec, slot, instance_name, desired.spec_hash))
            record(service, "InstanceCreated", f"instance created on {runtime.name}", instance_name)
        except devices.InsufficientDevices as exc:
            waiting = str(exc)  # not a failure: it starts once cards are free
            if service.last_error != waiting:
                record(service, "InsufficientDevices", waiting, instance_name)
            break
        except InstanceError as exc:
            error = str(exc)
            record(service, "InstanceFailed", error, instance_name)
            break

    live = result.keep + created
    ready &= {o.name for o in live}
    _sync_instances(service, runtime, live, ready)
    ready_by_role = Counter(o.role for o in live if o.name in ready)
    settled = _write_status(service, desired, ready_by_role, len(live), error, waiting)
    if service.desired_state == DesiredState.DELETED and not live:
        record(service, "Deleted", "every instance removed; service deleted")
        runtime.forget(service.name)
        with transaction.atomic():
            ApiKey.objects.forget_service(service.name)
            service.delete()
    publish_snapshot()
    return not settled


def _respect_node_marks(
    node: Node | None, result: planning.Plan
) -> tuple[planning.Plan, str | None]:
    """A cordoned node starts no instance; a draining one also gives up those it has. What
    waits because of it is said in the service's status."""
    if node is None or not (node.cordoned or node.draining):
        return result, None
    wanted = len(result.create) + (len(result.keep) if node.draining else 0)
    if node.draining:
        result = planning.Plan(keep=[], remove=result.keep + result.remove, create=[])
    else:
        result = replace(result, create=[])
    mark = "draining" if node.draining else "cordoned"
    return result, (f"{wanted} instance(s) wait: node {node.name} is {mark}" if wanted else None)


def _create(service: Service, runtime: Runtime, spec, slot: tuple[str, int], name, spec_hash):
    """Stage models, check the model store, take cards, render, and start one instance in
    `slot` (its role and its number within the role)."""
    role, pd_index = slot

    def report(progress: str) -> None:
        Service.objects.filter(pk=service.pk).update(progress=progress[:200])

    staged = provisioning.stage_models(spec, settings.WHARF_CACHE_DIR, report)
    provisioning.check_model_store(spec, settings.WHARF_MODEL_DIR)
    kind, count = provisioning.device_need(spec, role)
    # Cards are taken under a node-wide lock, so two services never get the same card.
    with node_lock("devices"):
        indexes: tuple[int, ...] = ()
        if count:
            in_use = provisioning.cards_in_use(runtime.list(), kind)
            indexes = devices.allocate(kind, count, CARDS.get(), in_use)
        placement = replace(
            runtime.placement(), devices=indexes, staged=staged, role=role, service=service.name,
            pd_index=pd_index, kv_dir=_kv_dir(service.name) if role else "",
            engine_key=engine_key(settings.SECRET_KEY.encode(), name),
        )  # fmt: skip
        _warn_if_it_cannot_fit(service, spec, placement)
        report(f"starting instance {name}")
        allocation = devices.encode_allocation(kind, indexes) if indexes else ""
        plan = render(spec, placement)
        folders = tuple(staged.values())
        return runtime.create(
            InstanceRequest(
                service.name, name, spec_hash, plan, allocation, role, pd_index, folders
            )
        )


def _kv_dir(service: str) -> str:
    """The folder a local prefill and decode instance exchange KV cache through."""
    path = settings.WHARF_INSTANCE_LOG_DIR.parent / "kv" / service
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _warn_if_it_cannot_fit(service: Service, spec, placement) -> None:
    """A deploy-time warning, never a refusal: the estimate is only an estimate."""
    config = provisioning.model_config(spec, placement)
    kind, _ = provisioning.device_need(spec)
    cards = [d for d in CARDS.get() if d.kind == kind and d.index in placement.devices]
    if config is None or not cards or spec.llm is None:
        return
    try:
        estimate = sizing.estimate(
            config,
            dtype=spec.llm.quantization or spec.llm.dtype or "auto",
            kv_cache_dtype=spec.llm.kv_cache_dtype or "auto",
            card_memory_gb=min(d.memory_mb for d in cards) / 1024,
            utilization=spec.llm.gpu_memory_utilization or 0.9,
            cards=len(cards),
            max_model_len=spec.llm.max_model_len,
        )
    except ValueError as exc:  # a config the estimator does not understand: say nothing
        log.info("no fit estimate for %s: %s", service.name, exc)
        return
    if not estimate.fits and not _events_since_intent(service, ("WontFit",)):
        record(service, "WontFit", f"this spec may not fit: {estimate.reason}")


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
    """Replicas per role and the spec hash to converge on, and an error that forbids creating
    instances."""
    if service.desired_state != DesiredState.RUNNING:
        return planning.Desired({"": 0}, spec_hash=""), None, None
    try:
        spec = service.parsed_spec()
    except SpecError as exc:  # stored before a validation rule tightened
        return planning.Desired({"": 0}, "", allow_create=False), None, f"invalid spec: {exc}"
    exits = _events_since_intent(service, ("InstanceExited", "InstanceFailed"))
    error = None
    if exits >= planning.MAX_EXITS:
        error = f"instances exited {exits} times; fix the spec and update or start the service"
    pd = spec.llm.pd if spec.llm else None
    replicas = (
        {"prefill": pd.prefill.instance, "decode": pd.decode.instance}
        if pd
        else {"": spec.metadata.instance}
    )
    return planning.Desired(replicas, spec.spec_hash(), error is None), spec, error


def _events_since_intent(service: Service, reasons: tuple[str, ...]) -> int:
    """How many such events since the user last created, updated or started the service."""
    intent = service.events.filter(reason__in=INTENT_REASONS).order_by("-id").first()
    events = service.events.filter(reason__in=reasons)
    if intent:
        events = events.filter(id__gt=intent.id)
    return events.count()


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
                service=service, name=observed.name, role=observed.role, runtime=runtime.name,
                node=settings.WHARF_NODE_NAME, spec_hash=observed.spec_hash,
                state=state, url=observed.url or "", devices=observed.devices,
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


def _write_status(service, desired, ready: Counter, live: int, error, waiting=None) -> bool:
    """Write the observed status if the spec has not changed meanwhile; True when settled."""
    status = planning.status(
        service.desired_state, desired.replicas, dict(ready), live, service.phase,
        failed=bool(error), waiting=waiting,
    )  # fmt: skip
    with transaction.atomic():
        updated = Service.objects.filter(pk=service.pk, generation=service.generation).update(
            phase=status.phase,
            progress=status.progress,
            ready_instances=sum(ready.values()),
            observed_generation=service.generation,
            last_error=error or waiting or "",
        )
        if updated and status.phase != service.phase:
            record(service, status.phase.capitalize(), status.progress)
    if error and error != service.last_error:
        log.warning("service %s failed: %s", service.name, error)
    return status.phase in ("running", "stopped", "failed", "degraded", "pending")
