"""Instances kept in memory: a runtime for testing the scheduler and the node agent without
Docker or processes. Tests decide which instances are healthy and which exit."""

from __future__ import annotations

import itertools
from dataclasses import replace

from contracts.engines.plan import ContainerPlan, Placement
from workers.runtimes.base import InstanceRequest, ObservedInstance, Report

PORTS = itertools.count(20000)


class MemoryRuntime:
    name = "memory"

    def __init__(self, node: str = "", address: str = "127.0.0.1"):
        self.node, self.address = node, address
        self.instances: dict[str, ObservedInstance] = {}
        self.requests: dict[str, InstanceRequest] = {}
        self.healthy: set[str] = set()  # urls whose checks pass
        self.created: list[str] = []  # every create, in order
        self.files: dict[str, bytes] = {}  # what instances see at a path (read_file)
        self.exec_passes: set[str] = set()  # instances whose exec probes pass

    def placement(self) -> Placement:
        return Placement(in_container=False, model_store="/models", host=self.address,
                         port=next(PORTS))  # fmt: skip

    def prepare(
        self, plan: ContainerPlan, docker_auth: str | None, report: Report, tenant: bool = False
    ) -> None:
        pass  # nothing to fetch

    def create(self, request: InstanceRequest) -> ObservedInstance:
        observed = ObservedInstance(
            service=request.service, name=request.name, spec_hash=request.spec_hash,
            running=True, url=f"http://{self.address}:{request.plan.port}",
            health_path=request.plan.health_path, devices=request.devices, role=request.role,
            pd_index=request.pd_index, paths=request.paths,
        )  # fmt: skip
        self.instances[request.name] = observed
        self.requests[request.name] = request
        self.created.append(request.name)
        return observed

    def remove(self, name: str) -> None:
        self.instances.pop(name, None)

    def list(self, service: str | None = None) -> list[ObservedInstance]:
        return [o for o in self.instances.values() if service in (None, o.service)]

    def read_file(self, name: str, path: str, limit: int) -> bytes:
        if path not in self.files:
            raise OSError(f"{path}: no such file")
        return self.files[path][:limit]

    def terminate(self, name: str) -> None:
        if name in self.instances:  # it ends at once, as an engine that handles SIGTERM
            self.exit(name, 0)

    def cpu_seconds(self, name: str) -> float | None:
        return None  # nothing runs: no figure

    def logs(self, name: str, tail: int = 200) -> str:
        return f"log of {name}" if name in self.instances else ""

    def forget(self, service: str) -> None:
        pass

    def exec_check(self, name: str, command: tuple[str, ...], timeout: float) -> bool:
        return name in self.exec_passes

    # What tests do to it
    def exit(self, name: str, code: int = 1) -> None:
        self.instances[name] = replace(self.instances[name], running=False, exit_code=code)

    def check(self, url: str, default_path: str, probe, key: str = "") -> bool:
        return url in self.healthy

    def make_healthy(self) -> None:
        self.healthy |= {o.url for o in self.instances.values() if o.url}
