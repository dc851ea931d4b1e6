"""The Deployment and ReplicaSet controllers, after kube-controller-manager's.

As on a real cluster, a Deployment owns ReplicaSets `<deployment>-<pod-template-hash>`, which
own the pods `<deployment>-<hash>-<5 chars>`; the ReplicaSets are kept in the store (so the
owner chain and garbage collection are the real ones) but not served: Wharf's runtime does not
read them. The rolling update is the controller's algorithm (reconcileNewReplicaSet,
reconcileOldReplicaSets with cleanupUnhealthyReplicas, maxSurge rounded up and maxUnavailable
down, both 0 making maxUnavailable 1); Recreate scales the old ReplicaSets to 0 and waits for
their pods to be gone. A scaling during a rollout goes through the same rolling steps rather
than the real controller's proportional scaling; `paused` is not supported.

The pod-template-hash is FNV-32a of the template's JSON, written with the controller's
alphabet; the real one hashes Go's dump of the template, so the values differ from a real
cluster's (only their form is the same).
"""

from __future__ import annotations

import copy
import json

from kube_fake_deletion import delete
from kube_fake_selectors import match_labels
from kube_fake_status import deployment_status, fenceposts, max_unavailable, replica_set_status
from kube_fake_store import KINDS, SAFE_CHARS, Store

DEPLOYMENTS, REPLICA_SETS, PODS = KINDS["deployments"], KINDS["replicasets"], KINDS["pods"]
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"


def template_hash(template: dict) -> str:
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(SAFE_CHARS[ord(char) % len(SAFE_CHARS)] for char in str(value))


def controller_uid(obj: dict) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def _owner_ref(owner: dict) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _replicas(rs: dict) -> int:
    return rs["spec"].get("replicas", 0)


def _available(rs: dict) -> int:
    return rs.get("status", {}).get("availableReplicas", 0)


def _revision(rs: dict) -> int:
    return int((rs["metadata"].get("annotations") or {}).get(REVISION, "0"))


class DeploymentController:
    def __init__(self, store: Store) -> None:
        self.store = store

    def step(self) -> None:
        for deployment in self.store.items(DEPLOYMENTS):
            if not deployment["metadata"].get("deletionTimestamp"):
                self._sync(deployment)
        for rs in self.store.items(REPLICA_SETS):
            if not rs["metadata"].get("deletionTimestamp"):
                self._sync_replica_set(rs)

    # Deployments ---------------------------------------------------------------------------

    def _sync(self, deployment: dict) -> None:
        meta = deployment["metadata"]
        owned = [
            rs
            for rs in self.store.items(REPLICA_SETS, meta["namespace"])
            if controller_uid(rs) == meta["uid"]
        ]
        owned.sort(key=lambda rs: (rs["metadata"]["creationTimestamp"], rs["metadata"]["name"]))
        wanted = template_hash(deployment["spec"]["template"])
        new = next((rs for rs in owned if rs["metadata"]["labels"].get(HASH_LABEL) == wanted), None)
        old = [rs for rs in owned if rs is not new]
        status = copy.deepcopy(deployment.get("status") or {})
        recreate = deployment["spec"]["strategy"]["type"] == "Recreate"
        if recreate:
            new = self._recreate(deployment, new, old, wanted, status)
        else:
            new = self._ensure_new(deployment, new, old, wanted, status)
            if not self._scale_new(deployment, new, old):
                self._scale_old(deployment, new, old)
        if new is not None:
            new = self.store.get(REPLICA_SETS, meta["namespace"], new["metadata"]["name"])
        fresh = [
            self.store.get(REPLICA_SETS, meta["namespace"], rs["metadata"]["name"]) for rs in old
        ]
        old = [rs for rs in fresh if rs is not None]
        deployment["status"] = deployment_status(self.store.clock, deployment, new, old, status)
        if new is not None:
            annotations = meta.setdefault("annotations", {})
            annotations[REVISION] = str(_revision(new))
        self.store.replace(DEPLOYMENTS, deployment)  # a status write: no new generation
        if (
            new is not None
            and deployment["status"].get("updatedReplicas", 0) == deployment["spec"]["replicas"]
        ):
            self._clean_up(deployment, old)

    def _ensure_new(
        self, deployment: dict, new: dict | None, old: list[dict], wanted: str, status: dict
    ) -> dict:
        latest = max((_revision(rs) for rs in old), default=0)
        if new is not None:
            if _revision(new) <= latest:  # a rollback to a kept ReplicaSet: it becomes newest
                new["metadata"]["annotations"][REVISION] = str(latest + 1)
                self.store.replace(REPLICA_SETS, new)
            if not any(c["type"] == "Progressing" for c in status.get("conditions") or []):
                message = f'Found new replica set "{new["metadata"]["name"]}"'
                self._condition(status, "FoundNewReplicaSet", message)
            return new
        spec = deployment["spec"]
        surge = fenceposts(deployment)[0] if spec["strategy"]["type"] == "RollingUpdate" else 0
        current = sum(_replicas(rs) for rs in old)
        replicas = max(0, min(spec["replicas"] + surge - current, spec["replicas"]))
        template = copy.deepcopy(spec["template"])
        template["metadata"].setdefault("labels", {})[HASH_LABEL] = wanted
        name = f"{deployment['metadata']['name']}-{wanted}"
        selector = copy.deepcopy(spec["selector"])
        selector.setdefault("matchLabels", {})[HASH_LABEL] = wanted
        annotations = {
            **(deployment["metadata"].get("annotations") or {}),
            REVISION: str(latest + 1),
            DESIRED: str(spec["replicas"]),
            MAX_REPLICAS: str(spec["replicas"] + surge),
        }
        created = self.store.create(
            REPLICA_SETS,
            {
                "metadata": {
                    "name": name,
                    "namespace": deployment["metadata"]["namespace"],
                    "labels": dict(template["metadata"]["labels"]),
                    "annotations": annotations,
                    "ownerReferences": [_owner_ref(deployment)],
                },
                "spec": {
                    "replicas": replicas,
                    "minReadySeconds": spec.get("minReadySeconds", 0),
                    "selector": selector,
                    "template": template,
                },
                "status": {"replicas": 0},
            },
        )
        self._condition(status, "NewReplicaSetCreated", f'Created new replica set "{name}"')
        return created

    def _condition(self, status: dict, reason: str, message: str) -> None:
        now = self.store.clock.stamp()
        conditions = [c for c in status.get("conditions") or [] if c["type"] != "Progressing"]
        before = next(
            (c for c in status.get("conditions") or [] if c["type"] == "Progressing"), None
        )
        if before and before["status"] == "True" and before["reason"] == reason:
            return
        since = before["lastTransitionTime"] if before and before["status"] == "True" else now
        conditions.append(
            {
                "type": "Progressing",
                "status": "True",
                "lastUpdateTime": now,
                "lastTransitionTime": since,
                "reason": reason,
                "message": message,
            }
        )
        status["conditions"] = conditions

    def _scale(self, rs: dict, replicas: int, deployment: dict) -> None:
        if _replicas(rs) == replicas:
            return
        surge = (
            fenceposts(deployment)[0]
            if deployment["spec"]["strategy"]["type"] == "RollingUpdate"
            else 0
        )
        rs["spec"]["replicas"] = replicas
        annotations = rs["metadata"].setdefault("annotations", {})
        annotations[DESIRED] = str(deployment["spec"]["replicas"])
        annotations[MAX_REPLICAS] = str(deployment["spec"]["replicas"] + surge)
        rs["metadata"]["generation"] = rs["metadata"].get("generation", 1) + 1
        self.store.replace(REPLICA_SETS, rs)

    def _scale_new(self, deployment: dict, new: dict, old: list[dict]) -> bool:
        """reconcileNewReplicaSet: up to maxSurge above the desired count, never past it."""
        desired = deployment["spec"]["replicas"]
        if _replicas(new) == desired:
            return False
        if _replicas(new) > desired:
            self._scale(new, desired, deployment)
            return True
        surge = fenceposts(deployment)[0]
        current = _replicas(new) + sum(_replicas(rs) for rs in old)
        if current >= desired + surge:
            return False
        target = _replicas(new) + min(desired + surge - current, desired - _replicas(new))
        self._scale(new, target, deployment)
        return True

    def _scale_old(self, deployment: dict, new: dict, old: list[dict]) -> bool:
        """reconcileOldReplicaSets: down while at least desired - maxUnavailable stay available."""
        if not sum(_replicas(rs) for rs in old):
            return False
        min_available = deployment["spec"]["replicas"] - max_unavailable(deployment)
        every = _replicas(new) + sum(_replicas(rs) for rs in old)
        new_unavailable = _replicas(new) - _available(new)
        budget = every - min_available - new_unavailable
        if budget <= 0:
            return False
        cleaned = 0
        for rs in old:  # unhealthy replicas first, or they would block the rollout
            if cleaned >= budget or _replicas(rs) == _available(rs):
                continue
            down = min(budget - cleaned, _replicas(rs) - _available(rs))
            self._scale(rs, _replicas(rs) - down, deployment)
            cleaned += down
        available = _available(new) + sum(_available(rs) for rs in old)
        room, scaled = available - min_available, 0
        for rs in old:
            if scaled >= room or not _replicas(rs):
                continue
            down = min(_replicas(rs), room - scaled)
            self._scale(rs, _replicas(rs) - down, deployment)
            scaled += down
        return cleaned + max(scaled, 0) > 0

    def _recreate(
        self, deployment: dict, new: dict | None, old: list[dict], wanted: str, status: dict
    ) -> dict | None:
        for rs in old:
            self._scale(rs, 0, deployment)
        old_uids = {rs["metadata"]["uid"] for rs in old}
        for pod in self.store.items(PODS, deployment["metadata"]["namespace"]):
            if controller_uid(pod) in old_uids:
                return new  # wait until the old pods are gone
        new = self._ensure_new(deployment, new, old, wanted, status)
        self._scale(new, deployment["spec"]["replicas"], deployment)
        return new

    def _clean_up(self, deployment: dict, old: list[dict]) -> None:
        """Keeps revisionHistoryLimit scaled-down old ReplicaSets, deleting the oldest."""
        limit = deployment["spec"].get("revisionHistoryLimit", 10)
        idle = [rs for rs in old if not _replicas(rs) and not rs.get("status", {}).get("replicas")]
        idle.sort(key=_revision)
        for rs in idle[: max(0, len(idle) - limit)]:
            delete(self.store, REPLICA_SETS, rs["metadata"]["namespace"], rs["metadata"]["name"])

    # ReplicaSets -----------------------------------------------------------------------------

    def _sync_replica_set(self, rs: dict) -> None:
        meta = rs["metadata"]
        pods = [
            pod
            for pod in self.store.items(PODS, meta["namespace"])
            if controller_uid(pod) == meta["uid"]
            and not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        missing = _replicas(rs) - len(pods)
        for _ in range(missing):
            pods.append(self._create_pod(rs))
        if missing < 0:
            age = sorted(
                pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])
            )
            ranked = sorted(pods, key=lambda p: (*_deletion_rank(p), -age.index(p)))
            for pod in ranked[:-missing]:
                delete(self.store, PODS, meta["namespace"], pod["metadata"]["name"])
                pods.remove(pod)
        rs["status"] = replica_set_status(self.store.clock, rs, pods)
        self.store.replace(REPLICA_SETS, rs)

    def _create_pod(self, rs: dict) -> dict:
        template = copy.deepcopy(rs["spec"]["template"])
        spec = template["spec"]
        for container in (spec.get("initContainers") or []) + spec["containers"]:
            resources = container.setdefault("resources", {})
            for name, amount in (resources.get("limits") or {}).items():
                resources.setdefault("requests", {}).setdefault(name, amount)
        spec.update(
            serviceAccountName=spec.get("serviceAccountName", "default"),
            serviceAccount=spec.get("serviceAccountName", "default"),
            enableServiceLinks=spec.get("enableServiceLinks", True),
            priority=0,
            preemptionPolicy="PreemptLowerPriority",
            tolerations=spec.get("tolerations", [])
            + [
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for taint in ("not-ready", "unreachable")
            ],
        )
        prefix = f"{rs['metadata']['name']}-"
        name = prefix + self.store.suffix()
        while self.store.get(PODS, rs["metadata"]["namespace"], name) is not None:
            name = prefix + self.store.suffix()
        meta = {
            "name": name,
            "generateName": prefix,
            "namespace": rs["metadata"]["namespace"],
            "labels": template["metadata"].get("labels") or {},
            "ownerReferences": [_owner_ref(rs)],
        }
        if template["metadata"].get("annotations"):
            meta["annotations"] = template["metadata"]["annotations"]
        assert match_labels(rs["spec"]["selector"], meta["labels"])
        return self.store.create(
            PODS,
            {
                "metadata": meta,
                "spec": spec,
                "status": {"phase": "Pending", "qosClass": _qos(spec)},
            },
        )


def _deletion_rank(pod: dict) -> tuple:
    """Which pods a ReplicaSet deletes first: unscheduled, pending, not ready, most restarted
    (then the newest)."""
    status = pod.get("status") or {}
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
    )
    phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get(status.get("phase", "Pending"), 0)
    restarts = sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])
    return (bool(pod["spec"].get("nodeName")), phase, ready, -restarts)


def _qos(spec: dict) -> str:
    resources = [
        c.get("resources") or {} for c in spec["containers"] + (spec.get("initContainers") or [])
    ]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(name) is not None
        and (r.get("limits") or {}).get(name) == (r.get("requests") or {}).get(name)
        for r in resources
        for name in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"
