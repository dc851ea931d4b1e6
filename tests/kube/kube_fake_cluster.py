"""A fake Kubernetes cluster for the runtime's tests: an API server on loopback that the
official client talks to, and the controllers behind it, run from the test's thread.

Nothing runs by itself: `step()` runs every controller once (garbage collector, Deployment
and ReplicaSet controllers, scheduler, kubelets) and `settle()` steps until nothing changes;
with `auto_settle` the cluster settles after every write through the API and every hook. Time
is the cluster's own (`now`, `advance`): grace periods, back-offs and progress deadlines pass
only when the test moves it. The hooks below stand for what a real cluster's nodes and
containers would do.
"""

from __future__ import annotations

from datetime import datetime

import kubernetes
from kube_fake_deletion import collect_garbage
from kube_fake_deployments import DeploymentController
from kube_fake_events import Recorder
from kube_fake_http import ApiServer
from kube_fake_kubelet import Kubelet, image_reference
from kube_fake_scheduler import Scheduler
from kube_fake_selectors import canonical_quantity, label_selector
from kube_fake_store import KINDS, Clock, Store, bad_request

PODS, NODES, NAMESPACES = KINDS["pods"], KINDS["nodes"], KINDS["namespaces"]
DEFAULT_NODES: dict[str, dict[str, str | int]] = {
    "gpu-node-1": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8},
    "gpu-node-2": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8},
    "npu-node-1": {"cpu": "192", "memory": "1536Gi", "huawei.com/Ascend910": 8},
}


class FakeCluster:
    def __init__(
        self,
        nodes: dict[str, dict[str, str | int]] | None = None,
        namespaces: tuple[str, ...] = ("default",),
        *,
        auto_settle: bool = False,
        auto_ready: bool = False,
        history: int = 10_000,
        seed: int = 0,
        npu_annotations: bool = True,
        leader_worker_sets: bool = False,
    ) -> None:
        self.clock = Clock()
        self.store = Store(self.clock, seed=seed, history=history)
        self.auto_settle = auto_settle
        # The LeaderWorkerSet CRD installed: its resource served (else a 404, as a cluster
        # without it answers).
        self.leader_worker_sets = leader_worker_sets
        recorder = Recorder(self.store)
        self._deployments = DeploymentController(self.store)
        self._scheduler = Scheduler(self.store, recorder)
        # npu_annotations: the NPU nodes' device plugin annotates the pods it gives cards to
        # (kube_fake_devices); False stands for a device plugin that does not.
        self._kubelet = Kubelet(self.store, recorder, auto_ready, npu_annotations)
        self._server: ApiServer | None = None
        self.url = ""
        # Every request as RBAC authorizes it: (verb, API group, resource), e.g.
        # ("create", "apps", "deployments") for an apply that creates, ("get", "", "pods/log").
        self.authorized: list[tuple[str, str, str]] = []
        for namespace in namespaces:
            self.add_namespace(namespace)
        for name, allocatable in (DEFAULT_NODES if nodes is None else nodes).items():
            self.add_node(name, allocatable)

    # Serving -------------------------------------------------------------------------------

    def start(self) -> str:
        """Serves the API on 127.0.0.1 (a free port); returns its URL."""
        self._server = ApiServer(self)
        self.url = self._server.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def api_client(self) -> kubernetes.client.ApiClient:
        """A client of the official library for this cluster (plain HTTP, no proxy)."""
        configuration = kubernetes.client.Configuration(host=self.url)
        configuration.proxy = None
        configuration.no_proxy = None
        return kubernetes.client.ApiClient(configuration)

    # Controllers and time ------------------------------------------------------------------

    def step(self) -> bool:
        """Runs every controller once; whether anything changed."""
        with self.store.lock:
            before = self.store.rv
            collect_garbage(self.store)
            self._deployments.step()
            self._scheduler.step()
            self._kubelet.step()
            return self.store.rv != before

    def settle(self, max_steps: int = 200) -> int:
        """Steps until nothing changes; the number of steps that changed something."""
        with self.store.lock:
            for count in range(max_steps):
                if not self.step():
                    return count
        raise RuntimeError(f"the fake cluster did not settle in {max_steps} steps")

    def _after_hook(self) -> None:
        if self.auto_settle:
            self.settle()

    @property
    def now(self) -> datetime:
        return self.clock.now

    def advance(self, seconds: float) -> None:
        """Moves the cluster's clock (grace periods, back-offs, progress deadlines)."""
        with self.store.lock:
            self.clock.advance(seconds)
            self._after_hook()

    def compact(self) -> None:
        """Forgets the watch history, as etcd's compaction does: a watch from any version
        before now gets 410 Gone."""
        with self.store.lock:
            self.store.compact()

    # Nodes and namespaces --------------------------------------------------------------

    def add_namespace(self, name: str) -> None:
        with self.store.lock:
            self.store.create(
                NAMESPACES,
                {
                    "metadata": {"name": name},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )

    def add_node(
        self, name: str, allocatable: dict[str, str | int], labels: dict | None = None
    ) -> None:
        """A Ready node; `allocatable` as {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8}
        ("pods" defaults to 110)."""
        with self.store.lock:
            index = len(self.store.items(NODES))
            amounts = {key: canonical_quantity(value) for key, value in allocatable.items()}
            amounts.setdefault("pods", "110")
            now = self.clock.stamp()
            self.store.create(
                NODES,
                {
                    "metadata": {
                        "name": name,
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            **(labels or {}),
                        },
                    },
                    "spec": {
                        "podCIDR": f"10.244.{index}.0/24",
                        "podCIDRs": [f"10.244.{index}.0/24"],
                    },
                    "status": {
                        "capacity": dict(amounts),
                        "allocatable": amounts,
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "lastHeartbeatTime": now,
                                "lastTransitionTime": now,
                                "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                            }
                        ],
                        "addresses": [
                            {"type": "InternalIP", "address": f"192.168.0.{10 + index}"},
                            {"type": "Hostname", "address": name},
                        ],
                        "nodeInfo": _node_info(self.store.new_uid()),
                    },
                },
            )
            self._after_hook()

    # Pods ------------------------------------------------------------------------------

    def _pods(self, target: str, namespace: str) -> list[dict]:
        """A pod by name, or the pods a label selector ("a=b,c") picks."""
        if "=" in target or "," in target or " in " in target or target.startswith("!"):
            picks = label_selector(target)
            return [pod for pod in self.store.items(PODS, namespace) if picks(pod)]
        return [self.store.require(PODS, namespace, target)]

    @property
    def auto_ready(self) -> bool:
        """Whether probes pass on pods the test has not `set_ready`."""
        return self._kubelet.auto_ready

    @auto_ready.setter
    def auto_ready(self, value: bool) -> None:
        with self.store.lock:
            self._kubelet.auto_ready = value
            self._after_hook()

    def set_ready(self, target: str, ready: bool = True, namespace: str = "default") -> list[str]:
        """Makes the probes of a pod (by name) or of the pods a label selector picks pass or
        fail; their kubelets report it at once. Returns the pods' names."""
        with self.store.lock:
            pods = self._pods(target, namespace)
            for pod in pods:
                self._kubelet.state.probes[pod["metadata"]["uid"]] = ready
                self._resync(pod)
            self._after_hook()
            return [pod["metadata"]["name"] for pod in pods]

    def _resync(self, pod: dict) -> None:
        node = self.store.get(NODES, "", pod["spec"].get("nodeName") or "")
        fresh = self.store.get(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        if node is not None and fresh is not None:
            self._kubelet.sync(fresh, node)

    def fail_image(self, image: str, message: str | None = None) -> None:
        """Pulls of `image` fail from now on (ErrImagePull, then ImagePullBackOff)."""
        ref = image_reference(image)
        default = (
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
            f'failed to resolve reference "{ref}": {ref}: not found'
        )
        with self.store.lock:
            self._kubelet.state.failing_images[image] = message or default
            self._after_hook()

    def allow_image(self, image: str) -> None:
        """Pulls of `image` succeed again (at the kubelet's next retry)."""
        with self.store.lock:
            self._kubelet.state.failing_images.pop(image, None)
            self._after_hook()

    def crash(
        self,
        pod: str,
        exit_code: int = 137,
        reason: str = "OOMKilled",
        container: str | None = None,
        namespace: str = "default",
    ) -> None:
        """A running container exits (default: its first container, OOM-killed)."""
        with self.store.lock:
            found = self.store.require(PODS, namespace, pod)
            name = container or found["spec"]["containers"][0]["name"]
            self._kubelet.crash(found, name, exit_code, reason)
            self._after_hook()

    def set_log(
        self, pod: str, text: str, container: str | None = None, namespace: str = "default"
    ) -> None:
        """What the container (default: the first) has logged."""
        with self.store.lock:
            found = self.store.require(PODS, namespace, pod)
            name = container or found["spec"]["containers"][0]["name"]
            self._kubelet.state.logs[(found["metadata"]["uid"], name)] = text

    def finish_terminating(self, pod: str | None = None, namespace: str = "default") -> list[str]:
        """The containers of a terminating pod (or of every terminating pod) have exited
        before their grace ran out: the kubelet removes the pods. Returns their names."""
        with self.store.lock:
            pods = (
                [self.store.require(PODS, namespace, pod)]
                if pod
                else self.store.items(PODS, namespace)
            )
            done = [p for p in pods if p["metadata"].get("deletionTimestamp")]
            for found in done:
                self._kubelet.state.finished.add(found["metadata"]["uid"])
                self._resync(found)
            self._after_hook()
            return [p["metadata"]["name"] for p in done]

    def read_log(
        self, namespace: str, name: str, container: str | None, tail_lines: int | None
    ) -> str:
        """The pod log endpoint's answer, with the API server's refusals."""
        with self.store.lock:
            pod = self.store.require(PODS, namespace, name)
            names = [c["name"] for c in pod["spec"]["containers"]]
            inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
            if container is None:
                if len(names) > 1:
                    more = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
                    raise bad_request(
                        f"a container name must be specified for pod {name}, choose one of: "
                        f"[{' '.join(names)}]{more}"
                    )
                container = names[0]
            if container not in names + inits:
                raise bad_request(f"container {container} is not valid for pod {name}")
            if not pod["spec"].get("nodeName"):
                raise bad_request(f"pod {name} does not have a host assigned")
            self._check_started(pod, container)
            text = self._kubelet.state.logs.get((pod["metadata"]["uid"], container), "")
        lines = text.splitlines(keepends=True)
        if tail_lines is not None:
            lines = lines[-tail_lines:] if tail_lines > 0 else []
        return "".join(lines)

    @staticmethod
    def _check_started(pod: dict, container: str) -> None:
        statuses = (pod["status"].get("containerStatuses") or []) + (
            pod["status"].get("initContainerStatuses") or []
        )
        status = next((s for s in statuses if s["name"] == container), None)
        waiting = (
            (status or {}).get("state", {}).get("waiting")
            if status
            else {"reason": "ContainerCreating"}
        )
        if waiting is not None and not (status or {}).get("lastState"):
            reason = waiting.get("reason", "ContainerCreating")
            if reason in ("ErrImagePull", "ImagePullBackOff"):
                reason = "trying and failing to pull image"
            name = pod["metadata"]["name"]
            raise bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )


def _node_info(uid: str) -> dict:
    return {
        "machineID": uid.replace("-", ""),
        "systemUUID": uid.upper(),
        "bootID": uid,
        "kernelVersion": "6.8.0-60-generic",
        "osImage": "Ubuntu 24.04.2 LTS",
        "containerRuntimeVersion": "containerd://2.1.0",
        "kubeletVersion": "v1.34.0",
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
