"""The control plane's own figures for Prometheus, as pure functions of what the database says:
services (ready against desired instances, a paused rollout), nodes (their state), workspace
quotas (used against limit), and how far the usage flush lags (of what Redis holds).
controlplane.metrics.exposition reads the rows at scrape time and serves these at GET /metrics;
deploy/prometheus/alerts.yaml alerts on them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contracts.spec import ServiceSpec
from contracts.spec_facts import replicas
from controlplane.nodes.state import STATES
from controlplane.workspaces.quotas import Footprint, Quotas

PAUSED_MARK = "rollout paused"  # in a service's progress while its rollout is paused


@dataclass(frozen=True)
class ServiceFigures:
    workspace: str
    service: str
    desired: int  # instances wanted now (0 for a stopped service or a finished job)
    ready: int
    rollout_paused: bool


def service_figures(
    workspace: str,
    service: str,
    spec: ServiceSpec | None,
    running: bool,
    autoscale: dict,
    ready: int,
    progress: str,
) -> ServiceFigures:
    """One service's. `spec` None: stored before a rule tightened, so it runs nothing
    (workers.scheduling.scheduler) and wants nothing; `running`: meant to run, not a completed
    job."""
    desired = sum(replicas(spec, autoscale).values()) if spec is not None and running else 0
    return ServiceFigures(workspace, service, desired, ready, PAUSED_MARK in progress)


def node_states(state: str) -> dict[str, int]:
    """A node's state as a state set: 1 for the one it is in, 0 for the others (the shape
    kube-state-metrics gives node conditions), so an alert names the state it looks for."""
    return {name: int(name == state) for name in STATES}


@dataclass(frozen=True)
class QuotaFigure:
    workspace: str
    resource: str  # services, instances, cards.gpu, cards.npu, queued_items
    used: int
    limit: int


def quota_figures(
    workspace: str, quotas: Quotas, held: Footprint, queued: tuple[int | None, int] = (None, 0)
) -> list[QuotaFigure]:
    """Each quota the workspace has (none for a resource without one), with what is held;
    `queued`: its bound on queued items (its quota, else the platform's) and those it has."""
    pairs: list[tuple[str, int | None, int]] = [
        ("services", quotas.services, held.services),
        ("instances", quotas.instances, held.instances),
    ]
    pairs += [(f"cards.{kind}", limit, held.cards[kind]) for kind, limit in quotas.cards.items()]
    pairs.append(("queued_items", *queued))
    return [
        QuotaFigure(workspace, resource, used, limit)
        for resource, limit, used in pairs
        if limit is not None
    ]


def unflushed_age(minutes: Iterable[int], now: float) -> float:
    """Seconds since the oldest finished usage minute among `minutes` (epoch minutes of the
    usage hashes in Redis, contracts.usage) ended: how long it has waited for the workers'
    flush, which claims a minute once it is over. 0 when none waits; the current minute's
    hash still grows, so it never counts."""
    current = int(now) // 60
    finished = [minute for minute in minutes if minute < current]
    return max(0.0, now - (min(finished) + 1) * 60) if finished else 0.0
