"""What an engine adapter produces: the plan of one instance's container, runtime-neutral."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from contracts.limits import TenantLimits


@dataclass(frozen=True)
class Mount:
    """A filesystem an instance sees. Users never name host paths: `bind` sources are chosen
    by the platform (the node's model store, the object-storage cache, NPU driver files)."""

    # "bind" (read-only host path) | "tmpfs" | "nfs" | "volume" (named, shared) | "pvc" (a
    # PersistentVolumeClaim: Kubernetes only)
    kind: str
    target: str
    source: str = ""  # bind: host path; nfs: "server:/export/path"; volume, pvc: its name
    size_bytes: int | None = None  # tmpfs
    read_only: bool = True


@dataclass(frozen=True)
class PdMember:
    """One instance of a prefill/decode-separated service (one member of it, for an instance
    across hosts), as the rank tables list it."""

    role: str  # "prefill" | "decode"
    index: int  # its place within its role, from 0
    host_ip: str  # the node it runs on
    device_ids: tuple[int, ...]  # physical NPU ids on that node
    port: int  # where its engine serves
    # Each card's RoCE address (`hccn_tool -i <id> -ip -g`), in device_ids' order; () when the
    # worker has not read them (the preview): the rank tables then show how to get them.
    device_ips: tuple[str, ...] = ()
    # Its member (gang rank) of an instance across hosts (unit.size > 1): each member is a
    # server of the instance's group; 0 for an instance on one host, and for the leader.
    rank: int = 0


@dataclass(frozen=True)
class GangMember:
    """One member of an instance that spans hosts (unit.size > 1; contracts.engines.gang):
    its rank (0: the leader, which serves HTTP), how many members there are, where the
    leader's rendezvous listens, and this member's own address on its node."""

    rank: int
    size: int
    leader_ip: str
    port: int  # the leader's rendezvous port (vLLM's --master-port, SGLang's dist-init port)
    ip: str = ""  # this member's node address ("" in a preview that knows none)

    @property
    def leads(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class Placement:
    """Where an instance will run, as far as its command line cares.

    Docker instances see the model store under /models and listen on all interfaces of their
    own network namespace. Local processes see host paths and share the host's ports.
    """

    in_container: bool = True
    model_store: str = "/var/lib/wharf/models"  # the node's model store, a host path
    host: str = "0.0.0.0"
    port: int | None = None  # None: the spec's (or the engine's default) port
    devices: tuple[int, ...] = ()  # card indexes (GPU or NPU) allocated to this instance
    # Object-storage URI -> host directory where the worker staged it.
    staged: dict[str, str] = field(default_factory=dict)
    # Prefill/decode separation: this instance's role ("prefill" | "decode"; "" otherwise),
    # the service's name (for per-service shared volumes) and, for local processes, a host
    # directory both roles share (the CPU path's KV-cache exchange folder).
    role: str = ""
    service: str = ""
    kv_dir: str = ""
    # The node's folder of the service's LoRA adapters (workers.models.adapters puts each there,
    # also while engines run); "" where there is none (the preview, a pod).
    adapters_dir: str = ""
    # Also for prefill/decode separation: this instance's index within its role (its KV engine
    # id, its entry in the rank tables), every instance of the service (the rank tables; the
    # preview makes one up when empty), the address other instances reach this one's KV side
    # channels at (empty: `host`), and the router's address (the gateway: the rank tables'
    # scheduler group, P2pNcclConnector's proxy; empty: localhost).
    pd_index: int = 0
    kv_port: int | None = None  # its KV side channel's port on the node (WHARF_PD_PORTS)
    pd_layout: tuple[PdMember, ...] = ()
    node_ip: str = ""
    router_ip: str = ""
    # The instance's engine key (contracts.engine_keys), for engines that can require one; ""
    # where no instance exists yet (the preview). Kept out of repr, so out of logs.
    engine_key: str = field(default="", repr=False)
    # Where this node has npu-smi (a host path, mounted at the same path into Ascend
    # containers): the Docker runtime looks on the node; "" where it has none. The default,
    # for the preview, is where ModelArts' guide finds it.
    npu_smi: str = "/usr/local/sbin/npu-smi"
    # The operator's bounds for instances whose spec names none (contracts.limits); the
    # built-in defaults for the preview's and tests' placements.
    limits: TenantLimits = field(default_factory=TenantLimits)
    # The OTLP/HTTP collector engines send their own traces to (WHARF_ENGINE_OTLP_ENDPOINT,
    # else WHARF_OTLP_ENDPOINT, as the engines reach it); "": engines trace nothing.
    otlp_endpoint: str = ""
    # This instance's member of a gang, for an instance across hosts (unit.size > 1); None
    # for one on a single host.
    gang: GangMember | None = None

    @property
    def models_root(self) -> str:
        return "/models" if self.in_container else self.model_store


@dataclass(frozen=True)
class SidecarPlan:
    """Another container of the instance (EAS's containers[1:]), beside the main one: in its
    network namespace (localhost reaches every container's port), started after it, stopped
    with it (contracts.engines.sidecars renders it)."""

    index: int  # its place in the spec's containers (1 for containers[1])
    image: str
    args: list[str]  # [] runs the image's own entrypoint
    port: int | None = None  # where it listens, if it serves
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)  # the instance's storage, not its models
    cpus: float | None = None
    memory_bytes: int | None = None
    pids_limit: int | None = None


@dataclass(frozen=True)
class ContainerPlan:
    image: str
    args: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    health_path: str = "/health"  # "" for a TCP check
    metrics_path: str | None = "/metrics"
    shm_size_bytes: int | None = None
    cpus: float | None = None
    memory_bytes: int | None = None
    pids_limit: int | None = None  # processes and threads; render() sets all three limits
    gpus: tuple[int, ...] = ()  # NVIDIA cards, as Docker device requests
    device_paths: tuple[str, ...] = ()  # host devices passed through (/dev/davinci0, ...)
    # Generated files the engine reads (rank tables): container path -> content. The runtime
    # writes them on the node and mounts them read-only.
    files: dict[str, str] = field(default_factory=dict)
    # Variables of `env` that hold a secret set per instance (the engine key): the preview
    # names them here and leaves them out of `env`, which the console copies into an edited
    # command's spec.
    secret_env: tuple[str, ...] = ()
    # In the node's network namespace, serving on the node's address at `port` (prefill and
    # decode with a network KV connector: engines.pd.on_host_network); else bridged.
    host_network: bool = False
    # The instance's other containers, in the spec's order (contracts.engines.sidecars).
    sidecars: list[SidecarPlan] = field(default_factory=list)

    def preview(self) -> dict:
        """The plan as the preview API and the console show it, without its secrets."""
        out = asdict(self)
        out["command"] = out.pop("args")
        for sidecar in out["sidecars"]:
            sidecar["command"] = sidecar.pop("args")
        out["env"] = {k: v for k, v in self.env.items() if k not in self.secret_env}
        out["secret_env"] = list(self.secret_env)
        return out
