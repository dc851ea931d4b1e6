"""A fleet in one test process: nodes as rows, each with an in-memory runtime, and passes of
the scheduler and every node's agent run in turn (no Celery, no threads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from controlplane.nodes.models import Node
from controlplane.services.models import Instance, Service
from workers.fleet import FleetSettings
from workers.nodes.agent import converge
from workers.nodes.starter import start_instance
from workers.runtimes.memory import MemoryRuntime
from workers.scheduling.scheduler import schedule

FLEET = FleetSettings(drain_settle=0)


def gpus(count: int, memory_mb: int = 81559) -> list[dict]:
    return [{"kind": "gpu", "index": i, "name": "NVIDIA H100", "memory_mb": memory_mb}
            for i in range(count)]  # fmt: skip


@dataclass
class Fleet:
    runtimes: dict[str, MemoryRuntime] = field(default_factory=dict)
    healthy: bool = True  # every started instance passes its checks
    down: set[str] = field(default_factory=set)  # nodes whose agents do not run

    def node(self, name: str, cards: int = 0, **fields) -> Node:
        self.runtimes[name] = MemoryRuntime(node=name, address=f"10.0.0.{len(self.runtimes) + 1}")
        return Node.objects.create(name=name, address=self.runtimes[name].address,
                                   cards=gpus(cards), heartbeat_at=timezone.now(),
                                   **fields)  # fmt: skip

    def beat(self, now: datetime | None = None) -> None:
        """Every node that is up heartbeats."""
        Node.objects.exclude(name__in=self.down).update(heartbeat_at=now or timezone.now())

    def step(self, now: datetime | None = None) -> None:
        """One scheduler pass for every service, then one agent pass on every node up."""
        self.beat(now)
        for name in Service.objects.values_list("name", flat=True):
            schedule(name, FLEET, now)
        for node, runtime in self.runtimes.items():
            if node in self.down:
                continue

            def start(name: str, node=node, runtime=runtime) -> None:
                start_instance(name, node, runtime, FLEET)

            converge(node, runtime, FLEET, start, now=now, check=runtime.check)
            if self.healthy:
                runtime.make_healthy()

    def settle(self, passes: int = 6, now: datetime | None = None) -> None:
        for _ in range(passes):
            self.step(now)

    def rows(self, service: str) -> list[Instance]:
        return list(Instance.objects.filter(service__name=service).order_by("name"))

    def states(self, service: str) -> list[tuple[str, str]]:
        return [(r.node, r.state) for r in self.rows(service)]
