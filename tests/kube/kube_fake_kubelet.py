"""The kubelets of every node: they run the pods bound to their node and report them.

A bound pod gets its host and pod IPs (10.244.<node>.<n>) and, on an NPU node, its cards from
the device plugin (kube_fake_devices); it runs its init containers to completion, then its
containers; a container is `started` once running (and its startup probe passes) and `ready`
once started and its readiness probe passes. A container without a probe passes at once, as on a
real kubelet; a probe's outcome is the test's (`set_ready`, or the cluster's auto_ready). An
image the test made fail (`fail_image`) shows ErrImagePull, then ImagePullBackOff until the
back-off (10 s, doubling, at most 300 s) has passed on the test's clock, with the kubelet's
events. A crash (`crash`) restarts the container at once the first time and after a back-off
(CrashLoopBackOff) on later ones. A pod deleted with a grace period stays, its containers
stopping, until the clock passes its deletionTimestamp or the test calls `finish_terminating`;
then it is removed. Until then its status stays as it was, Ready included, as on a real kubelet:
only its deletionTimestamp says that it is going.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kube_fake_devices import allocate
from kube_fake_events import Recorder
from kube_fake_store import KINDS, Store, parse_timestamp

PODS, NODES = KINDS["pods"], KINDS["nodes"]
MAX_BACKOFF = 300


def image_reference(image: str) -> str:
    """The full reference containerd resolves: "vllm/vllm:1" -> "docker.io/vllm/vllm:1"."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if rest else f"docker.io/library/{image}"


@dataclass
class Pull:
    attempts: int = 0
    retry_at: datetime | None = None
    told_backoff: bool = False
    error: str = ""


@dataclass
class Crash:
    backoff: int = 0  # seconds before the next restart; 0: the next crash restarts at once
    restart_at: datetime | None = None


@dataclass
class KubeletState:
    failing_images: dict[str, str] = field(default_factory=dict)  # image -> pull error
    probes: dict[str, bool] = field(default_factory=dict)  # pod uid -> probe outcome
    finished: set[str] = field(default_factory=set)  # pod uids whose containers have exited
    pulls: dict[tuple[str, str], Pull] = field(default_factory=dict)
    pulled: set[tuple[str, str]] = field(default_factory=set)
    crashes: dict[tuple[str, str], Crash] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    ips: dict[str, int] = field(default_factory=dict)  # node -> last host number given
    killed: set[str] = field(default_factory=set)


class Kubelet:
    def __init__(
        self, store: Store, recorder: Recorder, auto_ready: bool, npu_annotations: bool = True
    ) -> None:
        self.store, self.recorder, self.auto_ready = store, recorder, auto_ready
        self.npu_annotations = npu_annotations
        self.state = KubeletState()

    def step(self) -> None:
        nodes = {node["metadata"]["name"]: node for node in self.store.items(NODES)}
        for pod in self.store.items(PODS):
            if pod["spec"].get("nodeName") in nodes:
                self.sync(pod, nodes[pod["spec"]["nodeName"]])

    def sync(self, pod: dict, node: dict) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            self._terminate(pod)
            return
        status = pod["status"]
        if not status.get("podIP"):
            self._start_sandbox(pod, node)
        initialized = self._run_init_containers(pod)
        for container in pod["spec"]["containers"]:
            self._run(pod, container, "containers", initialized)
        self._conditions(pod, initialized)
        self.store.replace(PODS, pod)

    def probe_ok(self, pod: dict) -> bool:
        return self.state.probes.get(pod["metadata"]["uid"], self.auto_ready)

    # Sandbox and containers ----------------------------------------------------------

    def _start_sandbox(self, pod: dict, node: dict) -> None:
        name = node["metadata"]["name"]
        host = self.state.ips.get(name, 1) + 1
        self.state.ips[name] = host
        ip = node["spec"]["podCIDR"].rsplit(".", 1)[0] + f".{host}"
        host_ip = next(
            a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"
        )
        pod["status"].update(
            hostIP=host_ip,
            hostIPs=[{"ip": host_ip}],
            podIP=ip,
            podIPs=[{"ip": ip}],
            startTime=self.store.clock.stamp(),
        )
        if self.npu_annotations:
            allocate(self.store, pod, node, host_ip)

    def _run_init_containers(self, pod: dict) -> bool:
        statuses = []
        done = True
        for container in pod["spec"].get("initContainers") or []:
            if not done:
                statuses.append(self._waiting(container, "PodInitializing", None))
                continue
            old = _status_of(pod, "initContainerStatuses", container["name"])
            if old and "terminated" in old["state"]:
                statuses.append(old)
                continue
            waiting = self._pull(pod, container, "initContainers")
            if waiting:
                statuses.append(self._waiting(container, waiting["reason"], waiting["message"]))
                done = False
                continue
            now = self.store.clock.stamp()
            terminated = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
            statuses.append(
                {
                    **self._base(pod, container),
                    "ready": False,
                    "started": False,
                    "state": {
                        "terminated": {
                            **terminated,
                            "containerID": self._container_id(pod, container, 0),
                        }
                    },
                }
            )
        if statuses:
            pod["status"]["initContainerStatuses"] = statuses
        return done

    def _run(self, pod: dict, container: dict, group: str, initialized: bool) -> None:
        name = container["name"]
        old = _status_of(pod, "containerStatuses", name)
        if not initialized:
            new = self._waiting(container, "PodInitializing", None)
        elif old and ("running" in old["state"] or _crash_looping(old)):
            new = self._restart_if_due(pod, container, old)
        else:
            waiting = self._pull(pod, container, group)
            if waiting:
                new = self._waiting(container, waiting["reason"], waiting["message"])
            else:
                new = self._running(pod, container, restarts=0)
        running = "running" in new["state"]
        new["started"] = running and ("startupProbe" not in container or self.probe_ok(pod))
        new["ready"] = new["started"] and ("readinessProbe" not in container or self.probe_ok(pod))
        _put_status(pod, "containerStatuses", pod["spec"]["containers"], new)

    def _restart_if_due(self, pod: dict, container: dict, old: dict) -> dict:
        crash = self.state.crashes.get((pod["metadata"]["uid"], container["name"]))
        if "running" in old["state"] or crash is None or crash.restart_at is None:
            return {**old}
        if self.store.clock.now < crash.restart_at:
            return {**old}
        crash.restart_at = None
        return {
            **self._running(pod, container, old["restartCount"] + 1),
            "lastState": old["lastState"],
        }

    def _base(self, pod: dict, container: dict) -> dict:
        digest = hashlib.sha256(container["image"].encode()).hexdigest()
        reference = image_reference(container["image"]).rsplit(":", 1)[0]
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": f"{reference}@sha256:{digest}",
            "restartCount": 0,
            "lastState": {},
        }

    def _waiting(self, container: dict, reason: str, message: str | None) -> dict:
        waiting = {"reason": reason, **({"message": message} if message else {})}
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"waiting": waiting},
            "lastState": {},
        }

    def _running(self, pod: dict, container: dict, restarts: int) -> dict:
        path = f"spec.containers{{{container['name']}}}"
        self.recorder.kubelet(
            pod, "Normal", "Created", f"Created container: {container['name']}", path
        )
        self.recorder.kubelet(
            pod, "Normal", "Started", f"Started container {container['name']}", path
        )
        return {
            **self._base(pod, container),
            "containerID": self._container_id(pod, container, restarts),
            "restartCount": restarts,
            "state": {"running": {"startedAt": self.store.clock.stamp()}},
        }

    @staticmethod
    def _container_id(pod: dict, container: dict, restarts: int) -> str:
        seed = f"{pod['metadata']['uid']}/{container['name']}/{restarts}".encode()
        return f"containerd://{hashlib.sha256(seed).hexdigest()}"

    def _pull(self, pod: dict, container: dict, group: str) -> dict | None:
        """None when the image is there; else the container's waiting state. A failed pull
        is retried only once its back-off has passed, even when the image was fixed since."""
        image, key = container["image"], (pod["metadata"]["uid"], container["name"])
        path = f"spec.{group}{{{container['name']}}}"
        pull, now = self.state.pulls.get(key), self.store.clock.now
        if pull is not None and pull.retry_at is not None and now < pull.retry_at:
            if not pull.told_backoff:
                pull.told_backoff = True
                message = f'Back-off pulling image "{image}"'
                self.recorder.kubelet(pod, "Normal", "BackOff", message, path)
                self.recorder.kubelet(pod, "Warning", "Failed", "Error: ImagePullBackOff", path)
            message = f'Back-off pulling image "{image}": ErrImagePull: {pull.error}'
            return {"reason": "ImagePullBackOff", "message": message}
        error = self.state.failing_images.get(image)
        if key not in self.state.pulled:
            self.recorder.kubelet(pod, "Normal", "Pulling", f'Pulling image "{image}"', path)
        if error is None:
            self.state.pulls.pop(key, None)
            if key not in self.state.pulled:
                self.state.pulled.add(key)
                message = f'Successfully pulled image "{image}" in 1s (1s including waiting)'
                self.recorder.kubelet(pod, "Normal", "Pulled", message, path)
            return None
        pull = self.state.pulls.setdefault(key, Pull())
        pull.attempts += 1
        backoff = min(10 * 2 ** (pull.attempts - 1), MAX_BACKOFF)
        pull.retry_at, pull.told_backoff, pull.error = (
            now + timedelta(seconds=backoff),
            False,
            error,
        )
        message = f'Failed to pull image "{image}": {error}'
        self.recorder.kubelet(pod, "Warning", "Failed", message, path)
        self.recorder.kubelet(pod, "Warning", "Failed", "Error: ErrImagePull", path)
        return {"reason": "ErrImagePull", "message": error}

    # Crashes and termination -----------------------------------------------------------

    def crash(self, pod: dict, container: str, exit_code: int, reason: str) -> None:
        old = _status_of(pod, "containerStatuses", container)
        if not old or "running" not in old["state"]:
            raise ValueError(
                f"container {container} of pod {pod['metadata']['name']} is not running"
            )
        key = (pod["metadata"]["uid"], container)
        crash = self.state.crashes.setdefault(key, Crash())
        now = self.store.clock.now
        started = old["state"]["running"]["startedAt"]
        if now - parse_timestamp(started) >= timedelta(seconds=2 * MAX_BACKOFF):
            crash.backoff = 0  # it ran long enough: the kubelet forgets its back-off
        terminated = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": self.store.clock.stamp(),
            "containerID": old.get("containerID", ""),
        }
        spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
        if crash.backoff == 0:
            new = {
                **self._running(pod, spec, old["restartCount"] + 1),
                "lastState": {"terminated": terminated},
            }
        else:
            crash.restart_at = now + timedelta(seconds=crash.backoff)
            meta = pod["metadata"]
            who = f"{meta['name']}_{meta['namespace']}({meta['uid']})"
            message = f"back-off {crash.backoff}s restarting failed container={container} pod={who}"
            new = {
                **old,
                "ready": False,
                "started": False,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                "lastState": {"terminated": terminated},
            }
            path = f"spec.containers{{{container}}}"
            self.recorder.kubelet(
                pod,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {container} in pod {who}",
                path,
            )
        crash.backoff = min(max(crash.backoff * 2, 10), MAX_BACKOFF)
        new["ready"] = new["started"] = False
        _put_status(pod, "containerStatuses", pod["spec"]["containers"], new)
        self._conditions(pod, True)
        self.store.replace(PODS, pod)

    def _terminate(self, pod: dict) -> None:
        meta = pod["metadata"]
        if meta["uid"] not in self.state.killed:
            self.state.killed.add(meta["uid"])
            for container in pod["spec"]["containers"]:
                path = f"spec.containers{{{container['name']}}}"
                self.recorder.kubelet(
                    pod, "Normal", "Killing", f"Stopping container {container['name']}", path
                )
        due = self.store.clock.now >= parse_timestamp(meta["deletionTimestamp"])
        present = self.store.get(PODS, meta["namespace"], meta["name"]) is not None
        if present and (due or meta["uid"] in self.state.finished):
            self.store.remove(PODS, meta["namespace"], meta["name"])

    # Conditions ----------------------------------------------------------------------------

    def _conditions(self, pod: dict, initialized: bool) -> None:
        status = pod["status"]
        containers = status.get("containerStatuses") or []
        unready = [c["name"] for c in containers if not c["ready"]]
        incomplete = [
            c["name"]
            for c in status.get("initContainerStatuses") or []
            if "terminated" not in c["state"]
        ]
        wanted = [
            ("PodReadyToStartContainers", True, None, None),
            (
                "Initialized",
                initialized,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(incomplete)}]",
            ),
            (
                "Ready",
                not unready,
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(unready)}]",
            ),
            (
                "ContainersReady",
                not unready,
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(unready)}]",
            ),
        ]
        old = {c["type"]: c for c in status.get("conditions") or []}
        conditions = []
        for kind, ok, reason, message in wanted:
            value = "True" if ok else "False"
            before = old.get(kind)
            condition = {
                "type": kind,
                "status": value,
                "lastProbeTime": None,
                "lastTransitionTime": before["lastTransitionTime"]
                if before and before["status"] == value
                else self.store.clock.stamp(),
            }
            if not ok and reason:
                condition.update(reason=reason, message=message)
            conditions.append(condition)
        if "PodScheduled" in old:
            conditions.append(old["PodScheduled"])
        status["conditions"] = conditions
        waiting = [c for c in containers if "waiting" in c["state"] and not c.get("lastState")]
        status["phase"] = "Running" if initialized and containers and not waiting else "Pending"


def _crash_looping(status: dict) -> bool:
    return status["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"


def _status_of(pod: dict, field: str, name: str) -> dict | None:
    for status in pod["status"].get(field) or []:
        if status["name"] == name:
            return status
    return None


def _put_status(pod: dict, field: str, containers: list[dict], new: dict) -> None:
    """Sets one container's status; statuses keep the order of the pod's containers."""
    statuses = {s["name"]: s for s in pod["status"].get(field) or []}
    statuses[new["name"]] = new
    order = [c["name"] for c in containers]
    pod["status"][field] = [statuses[name] for name in order if name in statuses]
