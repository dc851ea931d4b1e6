"""EAS's container probes, as its service JSON writes them on `containers[]`:
`startup_check`, `liveness_check`, `readiness_check` and `health_check` (the older spelling of
readiness that pai-python-sdk writes), each one of `http_get` {path, port}, `tcp_socket`
{port} or `exec` {command}, with Kubernetes' timing fields and EAS's defaults
(../shared/eas/PARAMETERS.md §4.1). Pure.

What Wharf does with them (workers.nodes.probes maps them, the node agent runs them):
- readiness (`readiness_check`, or `health_check`) decides routing, as Wharf's own top-level
  `health_check` does: `success_threshold` passes make an instance ready, `failure_threshold`
  failures take it out of routing until it passes again;
- liveness restarts the instance after `failure_threshold` failures in a row;
- startup gives a new instance its deadline, `initial_delay_seconds + period_seconds *
  failure_threshold` (Kubernetes' sum), and holds readiness and liveness off until it passes;
  an instance that has not passed it by then has failed to start (back-off, restart).
An http_get or tcp_socket probe reaches the instance's own ports through its front
(gateway.front's /.wharf/probe), never an engine port from outside; exec runs in the instance.

Either Wharf's top-level `health_check` or the container's probes say how an instance is
probed, not both: a spec with both is refused naming both (probe_conflicts).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from contracts.spec_fleet import PROBE_PATH, InitialDelay, Period, ProbeTimeout, _Strict

PROBE_FIELDS = ("startup_check", "liveness_check", "readiness_check", "health_check")
MAX_EXEC_ARGS = 64
Port = Annotated[int, Field(ge=1, le=65535)]


def _no_dots(value: str) -> str:
    if ".." in value:
        raise ValueError("a probe's path must not contain '..'")
    return value


class HttpGet(_Strict):
    """An HTTP GET on one of the instance's ports: a 2xx or 3xx answer passes."""

    path: Annotated[str, Field(max_length=256, pattern=PROBE_PATH), AfterValidator(_no_dots)] = (
        Field(default="/", description="The path asked, e.g. /health.")
    )
    port: Port = Field(description="The instance's port asked, e.g. its serving port.")
    scheme: Literal["HTTP"] = Field(
        default="HTTP", description="HTTP only: an engine's own ports are plain HTTP."
    )


class TcpSocket(_Strict):
    """A TCP connect to one of the instance's ports: accepted passes."""

    port: Port


class Exec(_Strict):
    """A command run in the instance: exit status 0 passes."""

    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        min_length=1, max_length=MAX_EXEC_ARGS,
        description='The program and its arguments, e.g. ["/bin/sh", "-c", "test -f /tmp/ready"].',
    )  # fmt: skip


class ContainerProbe(_Strict):
    """One of EAS's probes: exactly one of http_get, tcp_socket, exec."""

    http_get: HttpGet | None = None
    tcp_socket: TcpSocket | None = None
    exec: Exec | None = None
    initial_delay_seconds: InitialDelay = 10
    period_seconds: Period = 10
    timeout_seconds: ProbeTimeout = 1
    success_threshold: int = Field(
        default=1, ge=1, le=100, description="Passes in a row after which it counts as passed."
    )
    failure_threshold: int = Field(
        default=3, ge=1, le=100, description="Failures in a row after which it counts as failed."
    )

    @model_validator(mode="after")
    def _one_action(self) -> ContainerProbe:
        given = [k for k in ("http_get", "tcp_socket", "exec") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of http_get, tcp_socket or exec")
        return self


Check = Annotated[ContainerProbe | None, Field(default=None)]


class ContainerProbes(_Strict):
    """The probe fields of a container (contracts.spec.Container mixes them in)."""

    startup_check: Check = Field(
        default=None,
        description="Startup probe: a new instance has initial_delay_seconds + period_seconds "
        "x failure_threshold to pass it; readiness and liveness wait for it.",
    )
    liveness_check: Check = Field(
        default=None, description="Liveness probe: failing it restarts the instance."
    )
    readiness_check: Check = Field(
        default=None,
        description="Readiness probe: failing it takes the instance out of routing.",
    )
    health_check: Check = Field(
        default=None, description="EAS's older spelling of readiness_check."
    )

    @model_validator(mode="after")
    def _probes(self) -> ContainerProbes:
        if self.readiness_check is not None and self.health_check is not None:
            raise ValueError(
                "readiness_check and health_check are the same probe (health_check is its "
                "older spelling): give one"
            )
        for name in ("startup_check", "liveness_check"):
            probe = getattr(self, name)
            if probe is not None and probe.success_threshold != 1:
                raise ValueError(f"{name}.success_threshold must be 1 (one pass is enough)")
        return self

    def readiness(self) -> ContainerProbe | None:
        return self.readiness_check or self.health_check

    def probes(self) -> list[ContainerProbe]:
        return [p for p in (getattr(self, name) for name in PROBE_FIELDS) if p is not None]


def drop_unset_probes(containers: list[dict]) -> None:
    """The dumped `containers` without the probe fields left unset: a spec that sets none
    keeps the hash it had before they existed. Set ones are in it: a container's probe
    ports are its front's, fixed when it starts (workers.runtimes), so changing them rolls
    the instances."""
    for container in containers:
        for name in PROBE_FIELDS:
            if container.get(name) is None:
                container.pop(name, None)


def probe_conflicts(health_check_set: bool, container: ContainerProbes | None) -> dict:
    """The error of a spec that sets Wharf's top-level health_check and container probes."""
    if not health_check_set or container is None:
        return {}
    given = [name for name in PROBE_FIELDS if getattr(container, name) is not None]
    if not given:
        return {}
    message = (
        "the top-level health_check (Wharf's) and containers[0]'s probes (EAS's) both say how "
        "an instance is probed: give one of them"
    )
    return {"health_check": [message], f"containers[0].{given[0]}": [message]}


def probe_ports(container: ContainerProbes | None, served: int | None, engine_port: int) -> dict:
    """{the port a probe names: the port it reaches in the instance}: the container's own
    serving port (`served`) is the engine's port where the runtime put it (`engine_port`, a
    free port for a local process); any other is the same port in the instance."""
    ports: dict[int, int] = {}
    for probe in container.probes() if container else ():
        action = probe.http_get or probe.tcp_socket
        if action is not None:
            ports[action.port] = engine_port if action.port == served else action.port
    return ports
