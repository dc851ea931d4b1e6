"""Events as the components write them, in core/v1 form.

The kubelet still records through the core/v1 recorder: `source`, `count`, `firstTimestamp`
and `lastTimestamp`, a repeat bumping `count`. The scheduler records through events.k8s.io/v1:
`eventTime`, `reportingComponent`, `action`, and no count nor timestamps on a first
occurrence; a repeat adds a `series`, which core/v1 shows as `count` and `lastTimestamp`. (The
real scheduler's recorder batches series updates every 30 minutes; here a repeat is written at
once.) A runtime reading both must take `count or 1` and `lastTimestamp or eventTime`.
"""

from __future__ import annotations

from kube_fake_store import KINDS, Store, micro_timestamp

EVENTS = KINDS["events"]
SCHEDULER = "default-scheduler"


class Recorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._sequence = 0

    def _involved(self, pod: dict, container_path: str | None) -> dict:
        meta = pod["metadata"]
        involved = {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": "v1",
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if container_path:
            involved["fieldPath"] = container_path
        return involved

    def _existing(self, involved: dict, reason: str, message: str, source: str) -> dict | None:
        for event in self.store.items(EVENTS, involved["namespace"]):
            same = (
                event["involvedObject"].get("uid") == involved["uid"]
                and event["involvedObject"].get("fieldPath") == involved.get("fieldPath")
                and event["reason"] == reason
                and event["message"] == message
                and event.get("reportingComponent") == source
            )
            if same:
                return event
        return None

    def _name(self, involved: dict) -> str:
        self._sequence += 1
        nanos = int(self.store.clock.now.timestamp()) * 10**9 + self._sequence
        return f"{involved['name']}.{nanos:x}"

    def kubelet(
        self,
        pod: dict,
        kind: str,
        reason: str,
        message: str,
        container_path: str | None = None,
    ) -> None:
        """A kubelet event (`kind` Normal or Warning) about a pod or one of its containers."""
        host = pod["spec"].get("nodeName", "")
        involved = self._involved(pod, container_path)
        now = self.store.clock.stamp()
        event = self._existing(involved, reason, message, "kubelet")
        if event is not None:
            event["count"] = event.get("count", 1) + 1
            event["lastTimestamp"] = now
            self.store.replace(EVENTS, event)
            return
        self.store.create(
            EVENTS,
            {
                "metadata": {"name": self._name(involved), "namespace": involved["namespace"]},
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "source": {"component": "kubelet", "host": host},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
                "type": kind,
                "eventTime": None,
                "reportingComponent": "kubelet",
                "reportingInstance": host,
            },
        )

    def scheduler(self, pod: dict, kind: str, reason: str, message: str, action: str) -> None:
        involved = self._involved(pod, None)
        now = micro_timestamp(self.store.clock.now)
        event = self._existing(involved, reason, message, SCHEDULER)
        if event is not None:
            count = (event.get("series") or {}).get("count", 1) + 1
            event["series"] = {"count": count, "lastObservedTime": now}
            event["count"] = count
            event["lastTimestamp"] = self.store.clock.stamp()
            self.store.replace(EVENTS, event)
            return
        self.store.create(
            EVENTS,
            {
                "metadata": {"name": self._name(involved), "namespace": involved["namespace"]},
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "source": {},
                "firstTimestamp": None,
                "lastTimestamp": None,
                "type": kind,
                "eventTime": now,
                "action": action,
                "reportingComponent": SCHEDULER,
                "reportingInstance": f"{SCHEDULER}-fake-control-plane",
            },
        )
