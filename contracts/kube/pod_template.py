"""The pod of one role of a service on Kubernetes: what the engine adapter renders for a pod
(contracts.engines.render), as the `spec` of a Deployment's pod template. Pure: no I/O.

A pod differs from a Docker instance in what the cluster provides itself:
- Cards are resource limits. The device plugins (nvidia.com/gpu, huawei.com/Ascend910) pick
  the cards and inject their device nodes, and the Ascend container runtime the driver's files,
  so the plan's host device paths and driver binds are not rendered: no hostPath volume, no
  privileged container, no privilege escalation.
- Every pod has its own IP, so the plan's host networking is not rendered either: the engine
  listens on all the pod's interfaces, and where a KV connector tells peers its address, that
  is the pod's IP (WHARF_POD_IP, from the downward API; `$(WHARF_POD_IP)` in the plan's
  environment and command line is expanded by the kubelet).
- Object-storage models are staged by init containers (`python -m workers.models.stage`, Wharf's own
  staging) into folders of one emptyDir, which the engine mounts read-only; the node's model
  store is a PersistentVolumeClaim (KubeSettings.model_store_claim).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.engines.pd import pd_connector, side_port, tensor_parallel_size
from contracts.engines.plan import ContainerPlan, Mount, Placement
from contracts.engines.vllm_ascend import DRIVER_FILES
from contracts.grants import own_image
from contracts.hub_refs import is_hub_ref
from contracts.kube import lws, rank_tables
from contracts.kube.front import ENGINE_PORT, front_container, tls_volume
from contracts.kube.names import KubeSettings
from contracts.kube.probes import probes
from contracts.limits import TenantLimits, granted_capabilities
from contracts.spec import OBJECT_STORAGE_SCHEMES, ServiceSpec
from contracts.spec_facts import card_need, model_refs, reserved_cpu

ENGINE = "engine"  # the engine container's name
MODEL_STORE = "/models"  # where engines see the model store (Placement.models_root)
STAGED_ROOT = "/staged"  # the staging volume, in the init containers
STAGED_VOLUME = "staged"
POD_IP_ENV = "WHARF_POD_IP"
POD_IP = f"$({POD_IP_ENV})"  # the kubelet's expansion of the variable
# The pod's own variables, from the downward API.
DOWNWARD = {POD_IP_ENV: "status.podIP", rank_tables.POD_NAME_ENV: "metadata.name"}
RANK_TABLES = "rank-tables"  # the volume of the rank tables' ConfigMap, and its init container
GIB, MIB, KIB = 1024**3, 1024**2, 1024
# Connectors whose KV side channel listens on one port per tensor-parallel rank.
PORT_PER_RANK = ("MooncakeConnectorV1",)


class ManifestError(ValueError):
    """What a spec asks that the cluster, as configured, cannot run; `field` names the spec's
    field (`llm.model`), as the API's errors do."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class StagedSource:
    """An object-storage folder or hub model a pod stages, where, and with what (from the
    spec; a hub model's commit from its version)."""

    uri: str
    folder: str  # /staged/<n>
    where: str  # the spec field that names it: storage[0].oss, llm.model
    endpoint: str | None = None
    access_key_id: str | None = None
    access_key_secret: str | None = field(default=None, repr=False)
    commit: str | None = None  # a hub model's, as its version records it

    @property
    def scheme(self) -> str:
        return self.uri.partition("://")[0]


def staged_sources(
    spec: ServiceSpec, hub_commits: dict[str, str] | None = None
) -> list[StagedSource]:
    """Every object-storage folder and hub model the spec reads, once each, in the nodes'
    order (storage entries, then the models: contracts.spec_facts.model_refs, as
    workers.models.provisioning stages them); hub models at their `hub_commits`."""
    found: dict[str, StagedSource] = {}

    def add(uri: str, where: str, store=None) -> None:
        if uri not in found:
            found[uri] = StagedSource(
                uri, f"{STAGED_ROOT}/{len(found)}", where,
                store.endpoint if store else None,
                store.access_key_id if store else None,
                store.access_key_secret if store else None,
                (hub_commits or {}).get(uri),
            )  # fmt: skip

    for i, entry in enumerate(spec.storage):
        for scheme in OBJECT_STORAGE_SCHEMES:
            if store := getattr(entry, scheme):
                add(store.path, f"storage[{i}].{scheme}", store)
    for where, ref in model_refs(spec):
        if "://" in ref:
            add(ref, where)
    return list(found.values())


def pod_placement(
    spec: ServiceSpec, role: str, staged: list[StagedSource], engine_key: str,
    limits: TenantLimits,
) -> Placement:  # fmt: skip
    """Where an engine of `role` runs in a pod: no card indexes (the device plugin assigns
    them), the model store at /models, staged folders in the staging volume, the operator's
    limits."""
    return Placement(
        in_container=True, model_store=MODEL_STORE, host="0.0.0.0", devices=(),
        staged={s.uri: s.folder for s in staged}, role=role, service=spec.name,
        engine_key=engine_key, node_ip=POD_IP, npu_smi="", limits=limits,
    )  # fmt: skip


def literal(text: str) -> str:
    """`text` as the kubelet leaves it: it expands `$(NAME)` in commands and variables, and
    `$$` to `$`. Only the pod's own variables (WHARF_POD_IP, WHARF_POD_NAME) and those
    LeaderWorkerSet sets in its groups' pods (contracts.kube.lws) are meant to expand."""
    text = text.replace("$", "$$")
    for name in (*DOWNWARD, *lws.EXPANDED):
        text = text.replace(f"$$({name})", f"$({name})")
    return text


def quantity(size: int) -> str:
    """Bytes as a Kubernetes quantity: 16Gi, 64000Mi, or plain bytes."""
    for suffix, unit in (("Gi", GIB), ("Mi", MIB), ("Ki", KIB)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def cpu_quantity(cores: float) -> str:
    return str(int(cores)) if cores == int(cores) else f"{max(1, round(cores * 1000))}m"


@dataclass
class Volumes:
    """The pod's volumes and the engine's mounts of them, built mount by mount."""

    spec: ServiceSpec
    settings: KubeSettings
    staged: list[StagedSource]
    volumes: dict[str, dict] = field(default_factory=dict)
    mounts: list[dict] = field(default_factory=list)

    def add(
        self, name: str, source: dict, target: str, read_only: bool, sub_path: str = ""
    ) -> None:
        self.volumes.setdefault(name, {"name": name, **source})
        mount = {"name": name, "mountPath": target, "readOnly": read_only}
        self.mounts.append({**mount, "subPath": sub_path} if sub_path else mount)

    def plan_mount(self, i: int, m: Mount) -> None:
        if m.kind == "tmpfs":
            self.add(f"tmpfs-{i}", {"emptyDir": memory(m.size_bytes)}, m.target, False)
        elif m.kind == "nfs":
            server, _, path = m.source.partition(":")
            nfs = {"server": server, "path": path, "readOnly": m.read_only}
            self.add(f"nfs-{i}", {"nfs": nfs}, m.target, m.read_only)
        elif m.kind in ("pvc", "dataset"):  # a dataset: the claim named after it
            claim = {"claimName": m.source, "readOnly": m.read_only}
            self.add(f"pvc-{i}", {"persistentVolumeClaim": claim}, m.target, m.read_only)
        elif m.kind == "volume":  # the folder prefill and decode share (ExampleConnector)
            self.add("kv", {"persistentVolumeClaim": {"claimName": self._kv_claim()}},
                     m.target, False, m.source)  # fmt: skip
        elif m.kind == "bind":
            self.bind(m)
        else:
            raise ManifestError("storage", f"a {m.kind} mount at {m.target} has no pod form")

    def bind(self, m: Mount) -> None:
        """Host paths become volumes: a staged folder, the model store; the driver's files
        come with the card (the device plugin and the Ascend runtime mount them)."""
        staged = {s.folder for s in self.staged}
        if m.source in staged:
            sub = m.source.removeprefix(f"{STAGED_ROOT}/")
            self.add(STAGED_VOLUME, {"emptyDir": {}}, m.target, True, sub)
        elif m.source.startswith(f"{MODEL_STORE}/"):
            claim = {"claimName": self._store_claim(m.source), "readOnly": True}
            sub = m.source.removeprefix(f"{MODEL_STORE}/")
            self.add("model-store", {"persistentVolumeClaim": claim}, m.target, True, sub)
        elif m.source not in DRIVER_FILES:
            raise ManifestError("storage", f"host path {m.source} cannot be mounted into a pod")

    def _store_claim(self, source: str) -> str:
        if self.settings.model_store_claim:
            return self.settings.model_store_claim
        name = source.removeprefix(f"{MODEL_STORE}/")
        where = next((w for w, ref in model_refs(self.spec) if ref == name), "llm.model")
        raise ManifestError(where, (
            f"{name!r} is a model-store name, and the cluster "
            "has no model store: set WHARF_K8S_MODEL_CLAIM to a PersistentVolumeClaim holding "
            "it, or give an oss://, obs:// or s3:// URI, or a path a pvc storage entry mounts"
        ))  # fmt: skip

    def _kv_claim(self) -> str:
        if self.settings.shared_kv_claim:
            return self.settings.shared_kv_claim
        raise ManifestError("llm.pd.kv_connector", (
            "ExampleConnector shares a folder between the prefill and decode pods: set "
            "WHARF_K8S_KV_CLAIM to a ReadWriteMany PersistentVolumeClaim, or choose "
            "NixlConnector (GPUs) or MooncakeConnectorV1 (Ascend)"
        ))  # fmt: skip


def memory(size: int | None) -> dict:
    """A memory-backed emptyDir (tmpfs), at most `size` bytes: every one has a size
    (contracts.limits caps the plan's), or it could take the node's memory."""
    if not size:
        raise ValueError("a memory emptyDir needs a size (contracts.limits.filled)")
    return {"medium": "Memory", "sizeLimit": quantity(size)}


def volumes(
    spec: ServiceSpec, plan: ContainerPlan, settings: KubeSettings, staged: list[StagedSource],
    files: str,
) -> Volumes:  # fmt: skip
    """The pod's volumes: shared memory, the plan's mounts, disk emptyDirs (a container's
    writable layer in Docker, size-limited here), the staging volume and the rank tables'
    ConfigMap (`files`, its name), as a folder: a subPath mount would not see its updates."""
    found = Volumes(spec, settings, staged)
    if plan.shm_size_bytes:
        found.add("dshm", {"emptyDir": memory(plan.shm_size_bytes)}, "/dev/shm", False)
    for i, mount in enumerate(plan.mounts):
        found.plan_mount(i, mount)
    for i, entry in enumerate(spec.storage):
        scratch = entry.empty_dir
        if scratch and not scratch.medium and entry.mount_path.rstrip("/") != "/dev/shm":
            size = {"sizeLimit": f"{scratch.size_limit}Gi"} if scratch.size_limit else {}
            found.add(f"scratch-{i}", {"emptyDir": size}, entry.mount_path, False)
    if staged:
        found.volumes.setdefault(STAGED_VOLUME, {"name": STAGED_VOLUME, "emptyDir": {}})
    if rank_tables.enabled(spec):
        found.add(RANK_TABLES, {"configMap": {"name": files}}, rank_tables.FOLDER, True)
    return found


def downward() -> list[dict]:
    """The pod's own variables, first, so that later values may name them."""
    return [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in DOWNWARD.items()
    ]


def env(spec: ServiceSpec, plan: ContainerPlan, secret: str, key: str) -> list[dict]:
    """The plan's environment; its secrets (the engine key) only by reference to `secret`;
    a rank-table pod's local table is its own (contracts.kube.rank_tables)."""
    values = dict(plan.env)
    if rank_tables.enabled(spec):
        values["RANK_TABLE_FILE_PATH"] = rank_tables.LOCAL_TABLE
    found = downward()
    for name, value in values.items():
        if name not in plan.secret_env and name not in DOWNWARD:
            found.append({"name": name, "value": literal(value)})
    for name in plan.secret_env:
        found.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return found


def ports(spec: ServiceSpec, plan: ContainerPlan, placement: Placement) -> list[dict]:
    """The serving port, and the KV side channel of a connector that has one."""
    found = [{"name": ENGINE_PORT, "containerPort": plan.port, "protocol": "TCP"}]
    connector = pd_connector(spec, placement)
    if connector is None or connector == "ExampleConnector":
        return found
    first = side_port(placement, plan.port)
    ranks = tensor_parallel_size(spec, placement) if connector in PORT_PER_RANK else 1
    for rank in range(ranks):
        name = f"kv-{rank}" if rank else "kv"
        found.append({"name": name, "containerPort": first + rank, "protocol": "TCP"})
    return found


def resources(spec: ServiceSpec, plan: ContainerPlan, role: str, settings: KubeSettings) -> dict:
    """CPU and memory limits from the plan (the spec's, else the operator's defaults), the
    spec's CPU and memory as requests; cards as limits of the device plugins' resources."""
    kind, cards = card_need(spec, role)
    out = cpu_and_memory(spec, plan)
    if cards:
        name = settings.npu_resource if kind == "npu" else settings.gpu_resource
        out["limits"][name] = str(cards)
    return out


def cpu_and_memory(spec: ServiceSpec, plan: ContainerPlan) -> dict:
    """A container's CPU and memory: limited always, requested as the spec asks. Kubernetes
    copies a limit into a request left out, so a spec that asks nothing requests 0: the
    operator's default bounds the pod, it reserves nothing on a node."""
    assert plan.cpus and plan.memory_bytes  # contracts.limits.filled
    meta, cpu = spec.metadata, reserved_cpu(spec)  # qos BestEffort: no CPU requested
    out = {
        "requests": {
            "cpu": cpu_quantity(cpu) if cpu else "0",
            "memory": f"{meta.memory}Mi" if meta.memory else "0",
        },
        "limits": {"cpu": cpu_quantity(plan.cpus), "memory": quantity(plan.memory_bytes)},
    }
    if meta.disk_mb:  # metadata.disk: the pod's ephemeral disk, requested and limited
        out["requests"]["ephemeral-storage"] = out["limits"]["ephemeral-storage"] = (
            f"{meta.disk_mb}Mi"
        )
    return out


def restricted(granted: tuple[str, ...] = ()) -> dict:
    """A container's securityContext as the Pod Security Standards' `restricted` profile has
    it (contracts.limits): no privilege escalation, every capability dropped but `granted`,
    the runtime's default seccomp profile. (Not non-root: engine images, vLLM's included, run
    as root, which without capabilities holds no privilege over the node.)"""
    capabilities: dict = {"drop": ["ALL"]}
    if granted:
        capabilities["add"] = list(granted)
    return {
        "allowPrivilegeEscalation": False, "privileged": False,
        "capabilities": capabilities, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip


def stager(
    source: StagedSource, n: int, settings: KubeSettings, secret: str, bounds: dict,
    hub_token: bool = False,
) -> dict:  # fmt: skip
    """The init container that stages `source` into its folder, within the engine's CPU and
    memory `bounds`. Credentials the spec gives come from the service's Secret, the rest from
    the operator's (storage_secret); a hub model is staged at its recorded commit, with the
    spec's token (`hub_token`: it has one)."""
    args = ["python", "-m", "workers.models.stage", "--into", source.folder]
    endpoint = source.endpoint or dict(settings.hub_endpoints).get(source.scheme)
    if endpoint:
        args += ["--endpoint", endpoint]
    if source.commit:
        args += ["--commit", source.commit]
    container: dict = {
        "name": f"stage-{n}", "image": settings.stager_image,
        "args": [literal(arg) for arg in (*args, source.uri)],
        "volumeMounts": [{"name": STAGED_VOLUME, "mountPath": STAGED_ROOT}],
        "resources": bounds, "securityContext": restricted(),
    }  # fmt: skip
    if source.access_key_id:
        variable = f"WHARF_{source.scheme.upper()}_ACCESS_KEY"
        container["env"] = [
            {"name": f"{variable}_{part.upper()}",
             "valueFrom": {"secretKeyRef": {"name": secret, "key": credential_key(n, part)}}}
            for part in ("id", "secret")
        ]  # fmt: skip
    if hub_token and is_hub_ref(source.uri):
        reference = {"secretKeyRef": {"name": secret, "key": HUB_TOKEN}}
        container["env"] = [{"name": HUB_TOKEN_ENV, "valueFrom": reference}]
    if settings.storage_secret:
        container["envFrom"] = [{"secretRef": {"name": settings.storage_secret}}]
    return container


HUB_TOKEN = "hub-token"  # the spec's llm.hub_token in the service's Secret
HUB_TOKEN_ENV = "WHARF_HUB_TOKEN"  # where `python -m workers.models.stage` reads it


def rank_table_waiter(settings: KubeSettings, bounds: dict) -> dict:
    """The init container that holds the engine back until the rank tables list its pod
    (within the engine's CPU and memory `bounds`)."""
    args = ["python", "-m", "workers.nodes.rank_tables", "--folder", rank_tables.FOLDER,
            "--pod", f"$({rank_tables.POD_NAME_ENV})"]  # fmt: skip
    return {
        "name": RANK_TABLES, "image": settings.stager_image, "args": args, "env": downward(),
        "volumeMounts": [{"name": RANK_TABLES, "mountPath": rank_tables.FOLDER,
                          "readOnly": True}],
        "resources": bounds, "securityContext": restricted(),
    }  # fmt: skip


def credential_key(n: int, part: str) -> str:
    """Where the service's Secret keeps a staged source's access key `id` or `secret`."""
    return f"stage-{n}-access-key-{part}"


def engine(
    spec: ServiceSpec, plan: ContainerPlan, placement: Placement, settings: KubeSettings,
    mounts: list[dict], secret: str, key: str,
) -> dict:  # fmt: skip
    """The engine container: the plan's command (the image's entrypoint replaced, as Docker
    instances have it), environment and ports, cards, probes and a preStop wait."""
    container = {
        "name": ENGINE, "image": plan.image,
        **({"command": [literal(arg) for arg in plan.args[:1]],  # none: the image's own
            "args": [literal(arg) for arg in plan.args[1:]]} if plan.args else {}),
        "env": env(spec, plan, secret, key), "ports": ports(spec, plan, placement),
        "resources": resources(spec, plan, placement.role, settings), "volumeMounts": mounts,
        **probes(spec, plan, settings), "securityContext": restricted(granted_capabilities(plan)),
    }  # fmt: skip
    if own_image(spec, settings.platform_images):
        container["imagePullPolicy"] = "Always"
    if settings.pre_stop_s:
        # The gateways drop a terminating pod from routing; the engine gets SIGTERM after this
        # wait, once they have, and then has the spec's grace period to finish its requests.
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": settings.pre_stop_s}}}
    return container


@dataclass(frozen=True)
class PodNames:
    """The other objects a pod refers to by name."""

    secret: str  # the service's Secret
    key: str  # the engine key's entry in it
    files: str  # the rank tables' ConfigMap
    pull: str  # the image pull Secret ("" without dockerAuth)


def pod_spec(
    spec: ServiceSpec, plan: ContainerPlan, placement: Placement, settings: KubeSettings,
    staged: list[StagedSource], refs: PodNames,
) -> dict:  # fmt: skip
    found = volumes(spec, plan, settings, staged, refs.files)
    serving = engine(spec, plan, placement, settings, found.mounts, refs.secret, refs.key)
    front = front_container(plan, settings, refs.secret, refs.key, restricted())
    pod: dict = {
        "containers": [serving, front],
        "volumes": [*found.volumes.values(), *filter(None, [tls_volume(settings)])],
        # The spec's grace covers in-flight requests; the preStop wait comes before it.
        "terminationGracePeriodSeconds": (
            spec.metadata.termination_grace_period + settings.pre_stop_s
        ),
        # Kubernetes' service links would add <SERVICE>_PORT variables: a Service named vllm
        # sets VLLM_PORT, which vLLM reads. Engines need no cluster credentials either.
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
    }  # fmt: skip
    token = bool(spec.llm and spec.llm.hub_token)
    # Init containers are bounded as the engine is.
    init = [stager(source, n, settings, refs.secret, cpu_and_memory(spec, plan), token)
            for n, source in enumerate(staged)]  # fmt: skip
    if rank_tables.enabled(spec):
        init.append(rank_table_waiter(settings, cpu_and_memory(spec, plan)))
    if init:
        pod["initContainers"] = init
    if spec.metadata.resource:  # the nodes labelled resource=<value>, as Wharf's own nodes
        pod["nodeSelector"] = {"resource": spec.metadata.resource}
    if refs.pull:
        pod["imagePullSecrets"] = [{"name": refs.pull}]
    return pod
