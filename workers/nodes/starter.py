"""Starting one placed instance on this node: stage its models, check the model store, render
its engine for the cards the scheduler gave it, and create it in the runtime."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from contracts import sizing
from contracts.allocation import decode_allocation
from contracts.engine_keys import engine_key
from contracts.engines import prepare, render
from contracts.engines.pd import on_host_network
from contracts.engines.plan import ContainerPlan, PdMember, Placement
from contracts.grants import own_image
from contracts.spec import ServiceSpec
from contracts.spec_facts import card_need
from contracts.spec_job import is_job
from contracts.spec_probes import probe_ports
from controlplane.nodes.models import Node
from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance, Service
from controlplane.workspaces.policy import (
    git_refusals,
    platform_images,
    registry_refusals,
    spec_refusals,
)
from workers.models import adapters, provisioning, storage_mounts, writable_storage
from workers.models.hub_pins import VersionPins
from workers.nodes import devices
from workers.nodes.exits import crashed
from workers.runtimes import InstanceError, InstanceRequest, Runtime
from workers.runtimes.base import Report
from workers.scheduling import gangs

log = logging.getLogger(__name__)
CARDS = devices.DeviceCache()  # this node's cards, for the will-it-fit warning


def start_instance(
    name: str, node: str, runtime: Runtime, fleet, stopping: Callable[[], bool] = lambda: False
) -> str | None:
    """Start the instance `name` placed on `node`; the service's name once its state changed.
    Nothing is created once `stopping()` says the worker is going (the row stays `creating`
    for its next start)."""
    row = (Instance.objects.select_related("service__workspace")
           .filter(name=name, node=node).first())  # fmt: skip
    if row is None or row.state not in (InstanceState.CREATING, InstanceState.BACKOFF):
        return None
    service = row.service
    spec = row.placed_spec()
    if spec is None:
        _fail(row, "its spec version is no longer valid or kept; update the service")
        return service.name
    runtime.remove(name)  # what is left of an earlier run (an exited container keeps its cards)

    def report(progress: str) -> None:
        Instance.objects.filter(pk=row.pk).update(message=progress[:200])

    try:
        _check_grants(service, spec, runtime.name)
        pins = VersionPins(service, row.spec_hash)
        # What an earlier run wrote to its writable copies goes up before the bucket is read.
        writable_storage.release(settings.WHARF_WRITABLE_DIR, name, spec)
        staged = provisioning.stage_models(spec, settings.WHARF_CACHE_DIR, report, pins)
        staged |= storage_mounts.provide(
            spec, name, runtime, staged, report, settings.WHARF_CACHE_DIR,
            settings.WHARF_WRITABLE_DIR, platform_images(),
        )  # fmt: skip
        provisioning.check_model_store(spec, settings.WHARF_MODEL_DIR)
        _, indexes = decode_allocation(row.devices) if row.devices else ("", ())
        placement = replace(
            runtime.placement(), devices=tuple(indexes), staged=staged, role=row.role,
            service=service.name, pd_index=row.pd_index,
            kv_dir=_kv_dir(service.name) if row.role else "",
            engine_key=engine_key(settings.WHARF_TOKEN_KEY.encode(), name),
            otlp_endpoint=settings.WHARF_ENGINE_OTLP_ENDPOINT,
        )  # fmt: skip
        if row.role:
            placement = pd_placement(placement, row, spec)
        if row.gang:  # a member of an instance across hosts: its rank, the leader's address
            placement = gangs.member_placement(placement, row, spec)
        placement = _with_adapters(placement, spec, staged)
        _warn_if_it_cannot_fit(service, spec, placement)
        plan = render(spec, placement)
        _prepare(runtime, spec, plan, report)  # pulls a missing image
        if stopping():
            return None
        report(f"starting the engine on node {node}")
        observed = runtime.create(InstanceRequest(
            service.name, name, row.spec_hash, plan, row.devices, row.role, row.pd_index,
            tuple(staged.values()), engine_key="" if is_job(spec) else placement.engine_key,
            probe_ports=_probe_ports(spec, plan.port), run_to_end=is_job(spec),
        ))  # fmt: skip
    except InstanceError as exc:  # the user must change something: a permanent failure
        _fail(row, str(exc))
        return service.name
    except Exception as exc:  # a daemon hiccup, a full disk: try again after a back-off
        log.warning("starting %s failed: %s", name, exc)
        crashed(row, runtime, fleet, timezone.now(), f"could not start: {exc}", logs=False)
        return service.name
    started = Instance.objects.filter(
        pk=row.pk, state__in=(InstanceState.CREATING, InstanceState.BACKOFF)
    ).update(
        state=InstanceState.STARTING, runtime=runtime.name, url=observed.url or "",
        started_at=timezone.now(), message=prepare.progress(spec), restart_at=None,
        probe_failures=0,
        probe_successes=0, liveness_failures=0, probed_at=None,
        adapters=adapters.started_with(spec, service.generation) if adapters.managed(spec) else {},
    )  # fmt: skip
    if started:  # else drained or moved meanwhile: the next pass deals with it
        record(service, "InstanceStarted", f"engine started on node {node}", name)
    return service.name


def _prepare(runtime: Runtime, spec: ServiceSpec, plan: ContainerPlan, report: Report) -> None:
    """What the instance's containers need on the node (runtime.prepare): the main one's
    image, then each sidecar's, each pulled as the workspace's own unless the platform
    vouches for it (WHARF_APPROVED_IMAGES)."""
    images = platform_images()
    runtime.prepare(plan, spec.dockerAuth, report, own_image(spec, images) is not None)
    for sidecar in plan.sidecars:
        alone = replace(plan, image=sidecar.image, sidecars=[])
        runtime.prepare(alone, spec.dockerAuth, report, sidecar.image not in images)


def _probe_ports(spec: ServiceSpec, engine_port: int) -> tuple[tuple[int, int], ...]:
    """The ports the spec's container probes name, and where each is beside the engine."""
    container = spec.containers[0] if spec.containers else None
    served = container.port if container else None
    return tuple(probe_ports(container, served, engine_port).items())


def _with_adapters(placement: Placement, spec: ServiceSpec, staged: dict[str, str]) -> Placement:
    """The service's LoRA adapters, put in its folder on this node, which the engine sees."""
    if spec.llm is None or spec.llm.lora is None:
        return placement
    folder = adapters.adapters_dir(placement.service)
    folder.mkdir(parents=True, exist_ok=True)  # mounted whole, also before it holds any
    for adapter in spec.llm.lora.adapters:
        try:
            adapters.provide(adapter, folder, lambda ref: Path(staged[ref]))
        except adapters.AdapterError as exc:
            raise InstanceError(f"adapter {adapter.name}: {exc}") from None
    return replace(placement, adapters_dir=str(folder))


def pd_placement(placement: Placement, row: Instance, spec: ServiceSpec) -> Placement:
    """A prefill or decode instance's wiring: the ports the scheduler gave it, its node's
    address (where peers reach its KV side channel), the gateway's (the router), and every
    instance of its version as the rank tables list them, on their nodes, with their cards'
    RoCE addresses from the node inventory (each member of an instance across hosts, with its
    rank). Peers placed later are not in its tables."""
    peers = list(
        Instance.objects.filter(service_id=row.service_id, spec_hash=row.spec_hash)
        .exclude(role="")
        .exclude(state__in=(InstanceState.DRAINING, InstanceState.FAILED))
    )
    nodes = {n.name: n for n in Node.objects.filter(name__in={p.node for p in peers})}
    own = nodes.get(row.node)
    node_ip = own.address if own else placement.host
    placement = replace(
        placement, node_ip=node_ip, pd_layout=tuple(_member(p, nodes.get(p.node)) for p in peers),
        router_ip=urlsplit(settings.WHARF_GATEWAY_URL).hostname or "",
    )  # fmt: skip
    if row.port:
        placement = replace(placement, port=row.port, kv_port=row.kv_port)
    if on_host_network(spec, placement) or not placement.in_container:
        placement = replace(placement, host=node_ip)  # a local process: its peers call it
    return placement


def _member(peer: Instance, node: Node | None) -> PdMember:
    _, cards = decode_allocation(peer.devices) if peer.devices else ("", ())
    ips = {c["index"]: c.get("ip", "") for c in (node.cards if node else []) if c["kind"] == "npu"}
    return PdMember(
        role=peer.role, index=peer.pd_index, host_ip=node.address if node else "",
        device_ids=tuple(cards), port=peer.port or 0,
        device_ips=tuple(ips.get(card, "") for card in cards), rank=peer.rank,
    )  # fmt: skip


def _check_grants(service: Service, spec: ServiceSpec, runtime: str) -> None:
    """The workspace's grants, again, on this node's runtime and as they are now: the API
    checked them on save against the runtime it knows of, and staff may have revoked one
    since. Nothing is staged, pulled or contacted for a spec past them."""
    refused = (spec_refusals(spec, service.workspace, runtime)
               or registry_refusals(spec, service.workspace)
               or git_refusals(spec, service.workspace))  # fmt: skip
    if refused:
        fields = "; ".join(f"{field}: {' '.join(why)}" for field, why in refused.items())
        raise InstanceError(f"not granted to its workspace: {fields}")


def _fail(row: Instance, message: str) -> None:
    Instance.objects.filter(pk=row.pk).update(state=InstanceState.FAILED, message=message)
    record(row.service, "InstanceFailed", message, row.name)
    gangs.fail_all(row, message)  # an instance across hosts fails whole


def _kv_dir(service: str) -> str:
    """The folder a local prefill and decode instance exchange KV cache through."""
    path = settings.WHARF_INSTANCE_LOG_DIR.parent / "kv" / service
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _warn_if_it_cannot_fit(service: Service, spec: ServiceSpec, placement) -> None:
    """A deploy-time warning, never a refusal: the estimate is only an estimate."""
    config = provisioning.model_config(spec, placement)
    kind, _ = card_need(spec)
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
            cards=len(cards) * spec.unit_size(),  # an instance across hosts: every member's
            max_model_len=spec.llm.max_model_len,
            lora=spec.llm.lora.slots if spec.llm.lora else (0, 0),
            pipeline=spec.llm.pipeline_parallel_size,
        )
    except ValueError as exc:  # a config the estimator does not understand: say nothing
        log.info("no fit estimate for %s: %s", service.name, exc)
        return
    if not estimate.fits and not service.events.filter(reason="WontFit").exists():
        record(service, "WontFit", f"this spec may not fit: {estimate.reason}")
