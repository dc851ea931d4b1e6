"""The small interface every runtime driver implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from contracts.engines.plan import ContainerPlan, Placement

# Labels (Docker) or state-file fields (process) that tie an instance to its service.
LABEL_SERVICE = "wharf.service"
LABEL_INSTANCE = "wharf.instance"
LABEL_SPEC_HASH = "wharf.spec-hash"
LABEL_DEVICES = "wharf.devices"  # contracts.allocation.encode_allocation, e.g. "gpu:0,1"
LABEL_ROLE = "wharf.role"  # "prefill" | "decode" in a prefill/decode-separated service
LABEL_PD_INDEX = "wharf.pd-index"  # the instance's number within its role (engine ids, tables)
LABEL_NODE = "wharf.node"  # the node whose worker owns it (several may share one dockerd)


def owned_by(node: str, label: str | None) -> bool:
    """Whether an instance labelled `label` belongs to this runtime's node; one from before
    nodes were recorded belongs to whichever node looks (there was only one)."""
    return not node or not label or label == node


# How a runtime tells the user what a long step is doing ("pulling <image>: 45% of 2.6 GB");
# the starter writes it on the instance row, which the service's progress shows.
Report = Callable[[str], None]


class InstanceError(Exception):
    """A failure the user can act on (missing image, missing model); shown as an event."""


def missing_bind_source(source: str, model_store: str) -> str:
    """The message for a bind mount whose host path is not there."""
    store = model_store.rstrip("/") + "/"
    if source.startswith(store):
        name = source.removeprefix(store)
        return f"model {name!r} is not in this node's model store ({model_store})"
    return f"{source} does not exist on this node"


@dataclass(frozen=True)
class InstanceRequest:
    service: str
    name: str
    spec_hash: str
    plan: ContainerPlan
    devices: str = ""  # the cards this instance holds, encoded (workers.nodes.devices)
    role: str = ""
    pd_index: int = 0
    paths: tuple[str, ...] = ()  # the staged model folders it reads (workers.models.storage)
    # The instance's engine key (contracts.engine_keys): its front lets in only callers with
    # it (gateway.front); "" starts the engine with no front (tests of the runtime alone).
    engine_key: str = field(default="", repr=False)
    # ((the port the spec's probes name, the port it is beside the engine), ...): what its
    # front lets the worker probe (gateway.front's /.wharf/probe; contracts.spec_probes).
    probe_ports: tuple[tuple[int, int], ...] = ()
    # A job's instance (contracts.spec_job): its engine runs to its end and the runtime never
    # restarts it itself; its node's agent decides what the end means (workers.nodes.jobs). It takes
    # no calls: no front (engine_key "": a quick job would end before one could join it) and
    # no published port.
    run_to_end: bool = False


@dataclass(frozen=True)
class ObservedInstance:
    service: str
    name: str
    spec_hash: str
    running: bool
    url: str | None  # where the engine listens, as the gateway reaches it
    health_path: str = "/health"
    exit_code: int | None = None
    restarts: int = 0
    stuck: bool = False  # running, but never became ready in time
    devices: str = ""
    role: str = ""
    pd_index: int = 0
    # Host paths the instance reads (Docker: its bind-mount sources; a process: the staged
    # folders it was created with; None: not recorded), reported whether it runs or not, since
    # a stopped instance may be restarted: the model cache keeps what they name.
    paths: tuple[str, ...] | None = ()
    fronted: bool = False  # behind its front (gateway.front): probes go through it
    # What ended it when its engine did not: "containers[2] exited with code 1" (a sidecar).
    ended: str = ""


class Runtime(Protocol):
    name: str

    def placement(self) -> Placement: ...

    def prepare(
        self, plan: ContainerPlan, docker_auth: str | None, report: Report, tenant: bool = False
    ) -> None:
        """Make what `plan` needs present on the node before `create` (Docker: pull a missing
        image, with the spec's dockerAuth or the node's own login). `tenant`: the image is the
        workspace's own, so its registry access is proved with the spec's credentials alone,
        also when the node has it already. InstanceError when the user must change the spec;
        any other exception is temporary (retried)."""
        ...

    def create(self, request: InstanceRequest) -> ObservedInstance: ...

    def remove(self, name: str) -> None: ...

    def list(self, service: str | None = None) -> list[ObservedInstance]: ...

    def logs(self, name: str, tail: int = 200) -> str: ...

    def read_file(self, name: str, path: str, limit: int) -> bytes:
        """The first `limit` bytes of file `path` as instance `name` sees it; OSError when
        it cannot be read (no such file, not a file, the instance gone)."""
        ...

    def terminate(self, name: str) -> None:
        """SIGTERM to instance `name`'s engine, which ends in its own time (or is removed
        later); nothing when it is not running."""
        ...

    def cpu_seconds(self, name: str) -> float | None:
        """CPU seconds instance `name` has used since it started; None: no figure."""
        ...

    def forget(self, service: str) -> None: ...

    def exec_check(self, name: str, command: tuple[str, ...], timeout: float) -> bool:
        """Run `command` in the instance `name` (EAS's exec probe): whether it exited 0
        within `timeout` seconds. One still running then is killed."""
        ...
