"""What an engine adapter produces: the plan of one instance's container, runtime-neutral."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mount:
    """A read-only model from the node's model store, or a tmpfs (`empty_dir` in memory)."""

    kind: str  # "model" | "tmpfs"
    target: str
    source: str = ""  # model store name for kind "model"
    size_bytes: int | None = None
    read_only: bool = True


@dataclass(frozen=True)
class Placement:
    """Where an instance will run, as far as its command line cares.

    Docker instances see models under /models and listen on all interfaces of their own
    network namespace; local processes see the host's model store and share the host's ports.
    """

    models_root: str = "/models"
    host: str = "0.0.0.0"
    port: int | None = None  # None: the spec's (or engine's default) port


@dataclass(frozen=True)
class ContainerPlan:
    image: str
    args: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"
    shm_size_bytes: int | None = None
    cpus: float | None = None
    memory_bytes: int | None = None

    def preview(self) -> dict:
        """The plan as the preview API and the console show it."""
        return {
            "image": self.image,
            "command": self.args,
            "port": self.port,
            "env": dict(self.env),
            "mounts": [m.__dict__ for m in self.mounts],
            "health_path": self.health_path,
            "metrics_path": self.metrics_path,
            "shm_size_bytes": self.shm_size_bytes,
            "cpus": self.cpus,
            "memory_bytes": self.memory_bytes,
        }
