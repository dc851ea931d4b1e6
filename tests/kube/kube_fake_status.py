"""The status the Deployment and ReplicaSet controllers write (calculateStatus and
syncRolloutStatus), with Kubernetes' condition reasons and messages. Counts that are 0 are
left out, as the API's `omitempty` does."""

from __future__ import annotations

import copy
import math
from datetime import timedelta

from kube_fake_selectors import match_labels
from kube_fake_store import Clock, parse_timestamp


def _scaled(value: object, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(str(value or 0))


def fenceposts(deployment: dict) -> tuple[int, int]:
    """maxSurge and maxUnavailable as numbers of pods (ResolveFenceposts)."""
    spec = deployment["spec"]
    rolling = spec["strategy"].get("rollingUpdate") or {}
    surge = _scaled(rolling.get("maxSurge"), spec["replicas"], True)
    unavailable = _scaled(rolling.get("maxUnavailable"), spec["replicas"], False)
    return surge, 1 if surge == 0 and unavailable == 0 else unavailable


def max_unavailable(deployment: dict) -> int:
    spec = deployment["spec"]
    if spec["strategy"]["type"] != "RollingUpdate" or spec["replicas"] == 0:
        return 0
    return min(fenceposts(deployment)[1], spec["replicas"])


def _ready_since(pod: dict) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True":
            return condition["lastTransitionTime"]
    return None


def replica_set_status(clock: Clock, rs: dict, pods: list[dict]) -> dict:
    min_ready = timedelta(seconds=rs["spec"].get("minReadySeconds") or 0)
    ready = [since for pod in pods if (since := _ready_since(pod))]
    available = [since for since in ready if parse_timestamp(since) + min_ready <= clock.now]
    labels = rs["spec"]["template"]["metadata"].get("labels") or {}
    labelled = [
        pod for pod in pods if match_labels({"matchLabels": labels}, pod["metadata"]["labels"])
    ]
    status = {
        "fullyLabeledReplicas": len(labelled),
        "readyReplicas": len(ready),
        "availableReplicas": len(available),
        "observedGeneration": rs["metadata"].get("generation", 1),
    }
    return {"replicas": len(pods), **{key: value for key, value in status.items() if value}}


def _count(rs: dict | None, field: str) -> int:
    if rs is None:
        return 0
    if field == "spec":
        return rs["spec"].get("replicas", 0)
    return (rs.get("status") or {}).get(field, 0)


def deployment_status(
    clock: Clock, deployment: dict, new: dict | None, old: list[dict], status: dict
) -> dict:
    """The Deployment's new status; `status` is its old one with any condition this sync set."""
    every = ([new] if new else []) + old
    available = sum(_count(rs, "availableReplicas") for rs in every)
    counts = {
        "observedGeneration": deployment["metadata"]["generation"],
        "replicas": sum(_count(rs, "replicas") for rs in every),
        "updatedReplicas": _count(new, "replicas"),
        "readyReplicas": sum(_count(rs, "readyReplicas") for rs in every),
        "availableReplicas": available,
        "unavailableReplicas": max(sum(_count(rs, "spec") for rs in every) - available, 0),
    }
    result = {
        **{key: value for key, value in counts.items() if value},
        "conditions": copy.deepcopy(status.get("conditions") or []),
    }
    desired = deployment["spec"]["replicas"]
    now = clock.stamp()
    if available >= desired - max_unavailable(deployment):
        _set(
            result,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    else:
        _set(
            result,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    _progress(clock, deployment, new, counts, result, now)
    if not result["conditions"]:
        del result["conditions"]
    return result


def _progress(
    clock: Clock, deployment: dict, new: dict | None, counts: dict, result: dict, now: str
) -> None:
    name = (
        f'ReplicaSet "{new["metadata"]["name"]}"'
        if new
        else f'Deployment "{deployment["metadata"]["name"]}"'
    )
    before = deployment.get("status") or {}
    desired = deployment["spec"]["replicas"]
    complete = (
        counts["updatedReplicas"] == desired
        and counts["replicas"] == desired
        and counts["availableReplicas"] == desired
        and counts["observedGeneration"] >= deployment["metadata"]["generation"]
    )
    progressed = (
        counts["updatedReplicas"] > before.get("updatedReplicas", 0)
        or counts["replicas"] - counts["updatedReplicas"]
        < before.get("replicas", 0) - before.get("updatedReplicas", 0)
        or counts["readyReplicas"] > before.get("readyReplicas", 0)
        or counts["availableReplicas"] > before.get("availableReplicas", 0)
    )
    current = next((c for c in result["conditions"] if c["type"] == "Progressing"), None)
    if complete:
        _set(
            result,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            f"{name} has successfully progressed.",
            now,
        )
    elif progressed:
        since = current["lastTransitionTime"] if current and current["status"] == "True" else now
        result["conditions"] = [c for c in result["conditions"] if c["type"] != "Progressing"]
        result["conditions"].append(
            {
                "type": "Progressing",
                "status": "True",
                "lastUpdateTime": now,
                "lastTransitionTime": since,
                "reason": "ReplicaSetUpdated",
                "message": f"{name} is progressing.",
            }
        )
    elif current and current["reason"] not in (
        "NewReplicaSetAvailable",
        "ProgressDeadlineExceeded",
    ):
        deadline = timedelta(seconds=deployment["spec"]["progressDeadlineSeconds"])
        if parse_timestamp(current["lastUpdateTime"]) + deadline < clock.now:
            _set(
                result,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f"{name} has timed out progressing.",
                now,
            )


def _set(result: dict, kind: str, status: str, reason: str, message: str, now: str) -> None:
    """SetDeploymentCondition: the same status and reason change nothing; the same status
    keeps its transition time."""
    current = next((c for c in result["conditions"] if c["type"] == kind), None)
    if current and current["status"] == status and current["reason"] == reason:
        return
    since = current["lastTransitionTime"] if current and current["status"] == status else now
    result["conditions"] = [c for c in result["conditions"] if c["type"] != kind]
    result["conditions"].append(
        {
            "type": kind,
            "status": status,
            "lastUpdateTime": now,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }
    )
