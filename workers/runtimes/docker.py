"""Instances as Docker containers, through the Docker SDK against a real dockerd."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound, NotFound
from docker.types import DeviceRequest, DriverConfig
from docker.types import Mount as DockerMount

from contracts.engines.plan import ContainerPlan, Mount, Placement
from contracts.engines.vllm_ascend import find_npu_smi
from contracts.limits import TenantLimits, filled, granted_capabilities
from contracts.serving_tls import ServingTls
from contracts.spec_storage import DATASET_MOUNT
from contracts.version import VERSION
from workers.runtimes import docker_sidecars as sidecars_
from workers.runtimes.archives import first_file
from workers.runtimes.base import (
    LABEL_DEVICES,
    LABEL_INSTANCE,
    LABEL_NODE,
    LABEL_PD_INDEX,
    LABEL_ROLE,
    LABEL_SERVICE,
    LABEL_SPEC_HASH,
    InstanceError,
    InstanceRequest,
    ObservedInstance,
    Report,
    missing_bind_source,
    owned_by,
)
from workers.runtimes.docker_front import (
    LABEL_FRONT,
    LABEL_FRONTED,
    engine_options,
    front_name,
    front_options,
    fronted,
    observed_url,
)
from workers.runtimes.exec_probe import exec_probe
from workers.runtimes.pulls import pull

# Serializes the making of service networks among this worker's threads.
_NETWORKS = threading.Lock()
LABEL_HEALTH_PATH = "wharf.health-path"
LABEL_PORT = "wharf.port"
# Docker's quick restarts of a crashed engine, before the agent's back-off (never a job's).
ON_FAILURE = {"Name": "on-failure", "MaximumRetryCount": 5}


def service_network(service: str) -> str:
    """The bridge network of a service's containers on a node. Docker keeps user-defined
    bridges apart, so one service's engines cannot reach another's container addresses (on
    its default bridge every container reaches every other's ports); the gateway reaches
    each at the port published on the node's address."""
    return f"wharf-svc-{service}"


def listed(client, label: str, attempts: int = 5) -> list:
    """The containers with `label`, stopped ones too. docker-py lists, then inspects each, so
    one removed in between (the agent stops instances on other threads) fails the whole call
    with NotFound: then it lists again."""
    for _ in range(attempts - 1):
        with contextlib.suppress(NotFound):
            return client.containers.list(all=True, filters={"label": label})
    return client.containers.list(all=True, filters={"label": label})


def run_options(
    request: InstanceRequest, *, model_dir: str, bind_address: str, node: str = "",
    limits: TenantLimits | None = None,
) -> dict:  # fmt: skip
    """The container's options for docker-py's containers.run: pure, so it is tested
    without a daemon (devices and mounts can't be exercised on a machine without cards).
    Limits the plan does not name are `limits`' (contracts.limits)."""
    plan = filled(request.plan, len(request.plan.gpus), limits or TenantLimits())
    labels = {
        LABEL_SERVICE: request.service,
        LABEL_INSTANCE: request.name,
        LABEL_SPEC_HASH: request.spec_hash,
        LABEL_HEALTH_PATH: plan.health_path,
        LABEL_PORT: str(plan.port),
        LABEL_DEVICES: request.devices,
        LABEL_ROLE: request.role,
        LABEL_PD_INDEX: str(request.pd_index),
        LABEL_NODE: node,
    }
    options: dict = {
        # Plans are whole command lines: replace the image's entrypoint (vLLM's and TGI's
        # images have one) rather than appending to it. No command: the image's own runs.
        **({"entrypoint": plan.args[:1], "command": plan.args[1:]} if plan.args else {}),
        "name": request.name,
        "labels": labels,
        # The plan's env only: docker-py sends nothing of the worker's own environment (its
        # secrets), and the container adds just its image's ENV (tests/test_engine_environment).
        "environment": plan.env,
        # Published on the node's address only (publish_address), at a port Docker picks; a
        # job's is not (it takes no calls).
        "ports": {} if request.run_to_end else {f"{plan.port}/tcp": (bind_address, None)},
        "mounts": _mounts(plan.mounts, model_dir),
        "shm_size": plan.shm_size_bytes,
        "restart_policy": {"Name": "no"} if request.run_to_end else ON_FAILURE,
        "init": True,  # not PID 1: an engine with no SIGTERM handler stops on it, not 10 s on
        **bounds(plan),
    }
    if plan.host_network:
        # The engine binds the node's address itself (its --host); nothing to publish.
        del options["ports"]
        options["network_mode"] = "host"
    else:
        options["network"] = service_network(request.service)
    if fronted(request):  # the front's port is published, not the engine's (docker_front)
        front = engine_options(request, bind_address)
        labels.update({LABEL_PORT: front["port"], LABEL_HEALTH_PATH: front["health_path"],
                       LABEL_FRONTED: "1"})  # fmt: skip
        options.update(ports=front["ports"], restart_policy=front["restart_policy"])
    if plan.sidecars:  # in its network namespace: restarted with it (docker_sidecars)
        labels[sidecars_.LABEL_SIDECARS] = str(len(plan.sidecars))
        options["restart_policy"] = sidecars_.NO_RESTART
    if plan.gpus:
        ids = [str(i) for i in plan.gpus]
        options["device_requests"] = [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]
    if plan.device_paths:
        options["devices"] = [f"{path}:{path}:rwm" for path in plan.device_paths]
    return options


def bounds(plan: ContainerPlan) -> dict:
    """What a tenant's container may use and do (contracts.limits): memory (swap included, so
    the limit is one), CPU time, tasks; no privilege gained through setuid files; no
    capability but those the plan needs. Docker's default seccomp profile stays on."""
    assert plan.memory_bytes and plan.cpus and plan.pids_limit  # contracts.limits.filled
    options: dict = {
        "mem_limit": plan.memory_bytes,
        "memswap_limit": plan.memory_bytes,
        "nano_cpus": int(plan.cpus * 1e9),
        "pids_limit": plan.pids_limit,
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
    }
    if granted := granted_capabilities(plan):
        options["cap_add"] = list(granted)
    return options


def publish_address(node_address: str) -> str:
    """Where a container's port is published: the node's address (WHARF_NODE_ADDRESS), the
    one gateways reach it at, and no other interface of the host."""
    return "127.0.0.1" if node_address == "localhost" else node_address


def _mounts(plan_mounts: list[Mount], model_dir: str) -> list[DockerMount]:
    mounts = []
    for m in plan_mounts:
        if m.kind == "bind":
            # Bind sources are platform paths (model store, staging cache, NPU driver);
            # users never name host paths.
            if not os.path.exists(m.source):
                raise InstanceError(missing_bind_source(m.source, model_dir))
            mounts.append(DockerMount(m.target, m.source, type="bind", read_only=m.read_only))
        elif m.kind == "tmpfs":
            mounts.append(DockerMount(m.target, None, type="tmpfs", tmpfs_size=m.size_bytes))
        elif m.kind == "nfs":
            mounts.append(_nfs_mount(m))
        elif m.kind in ("volume", DATASET_MOUNT):
            # a volume: shared by the instances of a service (the KV exchange); a dataset's:
            # the operator's, which the node has (workers.models.storage_mounts checks)
            mounts.append(DockerMount(m.target, m.source, type="volume", read_only=m.read_only))
        elif m.kind == "pvc":  # a spec taken under another WHARF_RUNTIME (runtime_checks)
            raise InstanceError(
                f"{m.target}: PersistentVolumeClaim {m.source!r} can be mounted only on "
                "Kubernetes; mount it with nfs, or run WHARF_RUNTIME=kubernetes"
            )
    return mounts


def bind_sources(attrs: dict) -> tuple[str, ...]:
    """The host paths a container bind-mounts, from its inspect data (`Mounts`, which covers
    --mount and -v binds alike); Docker keeps them while the container exists, running or not."""
    return tuple(
        sorted(
            {
                m["Source"]
                for m in attrs.get("Mounts") or ()
                if m.get("Type") == "bind" and m.get("Source")
            }
        )
    )


def _nfs_mount(mount) -> DockerMount:
    """NFS through Docker's local volume driver; the volume is named after its export."""
    server, _, path = mount.source.partition(":")
    name = "wharf-nfs-" + hashlib.sha256(mount.source.encode()).hexdigest()[:12]
    options = {"type": "nfs", "o": f"addr={server}" + (",ro" if mount.read_only else ""),
               "device": f":{path}"}  # fmt: skip
    return DockerMount(
        mount.target, name, type="volume", read_only=mount.read_only,
        driver_config=DriverConfig("local", options),
    )  # fmt: skip


class DockerRuntime:
    name = "docker"

    def __init__(
        self,
        model_dir: str,
        node_address: str = "127.0.0.1",
        files_dir: Path | None = None,
        node: str = "",
        limits: TenantLimits | None = None,
        front_image: str = f"wharf/wharf:{VERSION}",
        metrics_token: str = "",
        tls: ServingTls | None = None,
    ):
        self.client = docker.from_env()
        self.front_image, self.metrics_token = front_image, metrics_token
        self.tls = tls  # the node's certificate for its fronts (contracts.engine_tls)
        self.operator_limits = limits or TenantLimits()
        self.node = node  # lists and labels only this node's containers
        self.model_dir = model_dir.rstrip("/")
        self.node_address = node_address
        # Generated files (rank tables) are written here and bind-mounted read-only.
        self.files_dir = files_dir or Path(tempfile.gettempdir()) / "wharf-files"

    @functools.cached_property
    def limits(self) -> TenantLimits:
        """The operator's defaults, with CPU defaults no larger than the daemon's count of
        CPUs: it refuses a container asking more."""
        return replace(self.operator_limits, node_cpus=self.client.info()["NCPU"])

    @staticmethod
    def available() -> bool:
        try:
            docker.from_env(timeout=3).ping()
            return True
        except Exception:  # any failure means "no daemon we can use"
            return False

    def placement(self) -> Placement:
        # The spec's own port inside the container; Docker publishes it on a free host port.
        # Ascend containers get this node's npu-smi, wherever its driver put it.
        return Placement(
            in_container=True, model_store=self.model_dir, npu_smi=find_npu_smi(),
            limits=self.limits,
        )  # fmt: skip

    def prepare(
        self, plan: ContainerPlan, docker_auth: str | None, report: Report, tenant: bool = False
    ) -> None:
        """Pull the plan's image if this node lacks it (workers.runtimes.pulls). A tenant's
        own image that came from a registry is pulled again even when the node has it: the
        registry checks this workspace's credentials (the spec's dockerAuth, never the node's
        login), so one workspace cannot run another's private image from the node's store.
        An image built on the node (no registry digest) is the operator's: nothing to ask."""
        if not plan.host_network:  # its front's (docker_front), the platform's own image
            try:
                self.client.images.get(self.front_image)
            except ImageNotFound:
                pull(self.client.api, self.front_image, None, report, node_login=True)
        try:
            image = self.client.images.get(plan.image)
        except ImageNotFound:
            pull(self.client.api, plan.image, docker_auth, report, node_login=not tenant)
            return
        if tenant and image.attrs.get("RepoDigests"):
            pull(self.client.api, plan.image, docker_auth, report, node_login=False)

    def create(self, request: InstanceRequest) -> ObservedInstance:
        plan = request.plan
        try:
            self.client.images.get(plan.image)
        except ImageNotFound:
            raise InstanceError(f"image {plan.image} is not on this node; pull it first") from None
        if plan.files:
            request = replace(
                request, plan=replace(plan, mounts=plan.mounts + self._files(request))
            )
        address = publish_address(self.node_address)
        options = run_options(request, model_dir=self.model_dir, bind_address=address,
                              node=self.node, limits=self.limits)  # fmt: skip
        if not plan.host_network:
            options["network"] = self._network(request.service)  # by id: names may repeat
        try:
            container = self.client.containers.run(plan.image, detach=True, **options)
        except NotFound as exc:  # its network went with the service's last container meanwhile
            raise RuntimeError(f"starting {request.name} raced its network: {exc}") from exc
        except APIError as exc:
            raise InstanceError(f"docker refused the container: {exc.explanation or exc}") from exc
        if fronted(request):
            self._start_front(request, container)
        if plan.sidecars:  # the instance's other containers, in its namespace
            try:
                sidecars_.start_sidecars(self.client, request, container.id, self.node,
                                         lambda found: _mounts(found, self.model_dir))  # fmt: skip
            except InstanceError:  # one Docker refused: none of the instance either
                self.remove(request.name)
                raise
        container.reload()
        return self._observe(container)

    def _start_front(self, request: InstanceRequest, engine) -> None:
        """The engine's front in its network namespace; without it, no engine either."""
        self._remove_container(front_name(request.name), timeout=1)  # a crash's leftover
        options = front_options(request, engine.id, self.node, self.metrics_token, self.tls)
        try:
            self.client.containers.run(self.front_image, detach=True, **options)
        except (APIError, ImageNotFound) as exc:
            self._remove_container(request.name, timeout=1)
            if isinstance(exc, ImageNotFound):
                raise InstanceError(f"the engine front's image {self.front_image} is not on "
                                    "this node (WHARF_FRONT_IMAGE)") from exc  # fmt: skip
            raise InstanceError(f"docker refused the engine's front: "
                                f"{exc.explanation or exc}") from exc  # fmt: skip

    def _files(self, request: InstanceRequest) -> list[Mount]:
        root = self.files_dir / request.name
        mounts = []
        for i, (target, content) in enumerate(sorted(request.plan.files.items())):
            path = root / f"{i}-{Path(target).name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            mounts.append(Mount("bind", target, str(path)))
        return mounts

    def _network(self, service: str) -> str:
        """The id of the service's own bridge network on this node (service_network), made
        at its first instance. dockerd checks for a duplicate name only as best it can: two
        starts at once (two workers on one dockerd) may make two, and a container on a name
        with two networks does not start ("ambiguous"): every start keeps the oldest and
        removes the others, which no container can be on yet."""
        name = service_network(service)
        with _NETWORKS:
            found = self._networks(name)
            if not found:
                labels = {LABEL_SERVICE: service, LABEL_NODE: self.node}
                try:
                    self.client.networks.create(name, driver="bridge", labels=labels,
                                                check_duplicate=True)  # fmt: skip
                except APIError as exc:
                    if not self._networks(name):  # not another start's meanwhile: refused
                        raise InstanceError(
                            f"docker could not make the service's network {name}: "
                            f"{exc.explanation or exc}; with many services on one node, give "
                            "dockerd smaller default-address-pools (daemon.json)"
                        ) from exc
                found = self._networks(name)
        if not found:  # removed with the service's last container at this very moment
            raise RuntimeError(f"the network {name} went while an instance was starting")
        oldest, *others = sorted(found, key=lambda n: (n.attrs.get("Created", ""), n.id))
        for extra in others:
            with contextlib.suppress(NotFound):  # the other starter removed it first
                extra.remove()
        return oldest.id

    def forget(self, service: str) -> None:
        """Remove what a deleted service shared between its instances (the KV volume, its
        network)."""
        with contextlib.suppress(NotFound, APIError):
            self.client.volumes.get(f"wharf-kv-{service}").remove(force=True)
        self._drop_network(service)

    def _drop_network(self, service: str) -> None:
        for network in self._networks(service_network(service)):
            with contextlib.suppress(NotFound, APIError):  # in use again: by a new instance
                network.remove()

    def _networks(self, name: str) -> list:
        """The networks named `name` exactly (Docker's name filter also matches parts)."""
        return [n for n in self.client.networks.list(names=[name]) if n.name == name]

    def _observe(self, container, front_running: bool = True, sidecars=()) -> ObservedInstance:
        """The instance of an engine `container`; with a front (docker_front), running only
        while its front runs too (`front_running`), and its sidecars (docker_sidecars)."""
        labels = container.labels
        sidecar_down = sidecars_.sidecars_down(container, list(sidecars))
        tls = self.tls if labels.get(LABEL_FRONTED) == "1" else None  # a front's port
        url = observed_url(self.node_address, container.attrs, labels.get(LABEL_PORT, ""), tls)
        state = container.attrs.get("State", {})
        return ObservedInstance(
            service=labels[LABEL_SERVICE],
            name=labels[LABEL_INSTANCE],
            spec_hash=labels.get(LABEL_SPEC_HASH, ""),
            running=state.get("Running", False)
            and not state.get("Restarting", False)
            and (front_running or labels.get(LABEL_FRONTED) != "1")
            and not sidecar_down,
            url=url,
            health_path=labels.get(LABEL_HEALTH_PATH, ""),
            exit_code=None if state.get("Running") else state.get("ExitCode"),
            restarts=container.attrs.get("RestartCount", 0),
            devices=labels.get(LABEL_DEVICES, ""),
            role=labels.get(LABEL_ROLE, ""),
            pd_index=int(labels.get(LABEL_PD_INDEX) or 0),
            paths=bind_sources(container.attrs),
            fronted=labels.get(LABEL_FRONTED) == "1",
            ended=sidecar_down if state.get("Running") else "",  # else its own exit says
        )

    def read_file(self, name: str, path: str, limit: int) -> bytes:
        """Read through dockerd (`docker cp`'s archive), so a file in any of its mounts."""
        try:
            stream, _ = self.client.api.get_archive(name, path)
        except (NotFound, APIError) as exc:
            raise OSError(f"{path}: {getattr(exc, 'explanation', None) or exc}") from None
        return first_file(stream, path, limit)

    def terminate(self, name: str) -> None:
        with contextlib.suppress(NotFound, APIError):  # gone, or not running: nothing to signal
            self.client.containers.get(name).kill(signal="SIGTERM")

    def cpu_seconds(self, name: str) -> float | None:
        """CPU seconds the engine's container and its sidecars have used (their cgroups, as
        `docker stats` reads them, in one look each); None when it is not there."""
        used = [self._cpu(c.name) for c in sidecars_.of_instance(self.client, name)]
        main = self._cpu(name)
        return None if main is None else main + sum(u for u in used if u)

    def _cpu(self, name: str) -> float | None:
        try:
            stats = self.client.api.stats(name, stream=False, one_shot=True)
        except NotFound:
            return None
        usage = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        return usage / 1e9 if isinstance(usage, int) and usage > 0 else None

    def list(self, service: str | None = None) -> list[ObservedInstance]:
        label = f"{LABEL_SERVICE}={service}" if service else LABEL_SERVICE
        containers = listed(self.client, label)
        sidecars, mine = sidecars_.companions(
            [c for c in containers if owned_by(self.node, c.labels.get(LABEL_NODE))]
        )
        fronts = {c.labels[LABEL_FRONT]: c for c in mine if LABEL_FRONT in c.labels}
        engines = [c for c in mine if LABEL_FRONT not in c.labels]
        for name in set(fronts) - {c.name for c in engines}:  # its engine went: so does it
            self._remove_container(fronts[name].name, timeout=1)
        for name in set(sidecars) - {c.name for c in engines}:  # and so do its sidecars
            for sidecar in sidecars[name]:
                self._remove_container(sidecar.name, timeout=1)
        return [self._observe(c, _runs(fronts.get(c.name)), sidecars.get(c.name, ()))
                for c in engines]  # fmt: skip

    def remove(self, name: str) -> None:
        shutil.rmtree(self.files_dir / name, ignore_errors=True)
        self._remove_container(front_name(name), timeout=1)  # no new calls reach it
        for sidecar in listed(self.client, f"{sidecars_.LABEL_SIDECAR}={name}"):
            self._remove_container(sidecar.name, timeout=5)  # before the namespace they are in
        # vLLM takes a while to drain on SIGTERM; ten seconds, then SIGKILL.
        container = self._remove_container(name, timeout=10)
        if container is None:
            return
        service = container.labels.get(LABEL_SERVICE)
        if service and not listed(self.client, f"{LABEL_SERVICE}={service}"):
            self._drop_network(service)  # its last container here: Docker's pools are few

    def _remove_container(self, name: str, timeout: int):
        """Stop (SIGTERM, SIGKILL after `timeout` s) and remove container `name`, if any."""
        try:
            container = self.client.containers.get(name)
        except NotFound:
            return None
        with contextlib.suppress(APIError):
            container.stop(timeout=timeout)
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)
        return container

    def logs(self, name: str, tail: int = 200) -> str:
        try:
            container = self.client.containers.get(name)
            found = container.logs(tail=tail).decode(errors="replace")
        except NotFound:
            return ""
        if container.labels.get(sidecars_.LABEL_SIDECARS):  # theirs after its own
            found += sidecars_.sidecar_logs(self.client, name, tail)
        return found

    def exec_check(self, name: str, command: tuple[str, ...], timeout: float) -> bool:
        """`command` exec'd in the engine container (its user, environment and working
        directory), as `docker exec`; past `timeout` it is killed (workers.runtimes.exec_probe)."""
        return exec_probe(self.client.api, name, command, timeout)


def _runs(container) -> bool:
    state = container.attrs.get("State", {}) if container is not None else {}
    return bool(state.get("Running")) and not state.get("Restarting", False)
