"""The fake API server's storage: typed objects by kind, namespace and name, one global
resourceVersion counter (as etcd's revision), the history that watches replay, and the API
server's error bodies (kind Status).

Objects are kept in their wire form (camelCase dicts, as the API server would send them), and
every read hands out a copy, so what a test or a request thread holds never changes under it.
One re-entrant lock guards everything; `changed` is signalled on every write so that watches
wake up.
"""

from __future__ import annotations

import copy
import random
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

START = datetime(2026, 1, 1, tzinfo=UTC)  # the fake clock's origin: timestamps are repeatable
SAFE_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand's alphabet


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    generation: bool = False  # metadata.generation kept and bumped on spec changes
    status: bool = False  # a status subresource: applies to the object ignore .status

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How error messages name the resource: `configmaps`, `deployments.apps`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


KINDS = {
    kind.plural: kind
    for kind in (
        Kind("ConfigMap", "configmaps"),
        Kind("Secret", "secrets"),
        Kind("Pod", "pods", generation=True, status=True),
        Kind("Event", "events"),
        Kind("Node", "nodes", namespaced=False, status=True),
        Kind("Namespace", "namespaces", namespaced=False, status=True),
        Kind("Deployment", "deployments", "apps", generation=True, status=True),
        Kind("ReplicaSet", "replicasets", "apps", generation=True, status=True),
        Kind("NetworkPolicy", "networkpolicies", "networking.k8s.io", generation=True),
        Kind("Service", "services"),
        # A custom resource: served only by a cluster started with leader_worker_sets=True
        # (its CRD installed); no controller makes its pods.
        Kind(
            "LeaderWorkerSet",
            "leaderworkersets",
            "leaderworkerset.x-k8s.io",
            generation=True,
            status=True,
        ),  # fmt: skip
    )
}
BY_KIND = {kind.kind: kind for kind in KINDS.values()}


class ApiError(Exception):
    """An error response of the API server: its HTTP code and its Status body."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(kind: Kind, name: str, **more: object) -> dict:
    details: dict = {"name": name} if name else {}
    if kind.group:
        details["group"] = kind.group
    return {**details, "kind": kind.plural, **more}


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind.qualified} "{name}" not found', _details(kind, name))


def conflict(kind: Kind, name: str, message: str, causes: list | None = None) -> ApiError:
    details = _details(kind, name, **({"causes": causes} if causes else {}))
    return ApiError(409, "Conflict", message, details)


def invalid(kind: Kind, name: str, errors: list[tuple[str, str, str]]) -> ApiError:
    """422: `errors` are (field, cause reason, message) as the validation wrote them."""
    causes = [{"reason": reason, "message": text, "field": where} for where, reason, text in errors]
    summary = ", ".join(f"{where}: {text}" for where, _, text in errors)
    listed = f"[{summary}]" if len(errors) > 1 else summary
    message = f'{kind.kind}{"." + kind.group if kind.group else ""} "{name}" is invalid: {listed}'
    details = {"name": name, **({"group": kind.group} if kind.group else {}), "kind": kind.kind}
    return ApiError(422, "Invalid", message, {**details, "causes": causes})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Clock:
    """The cluster's time, moved only by the test (`FakeCluster.advance`)."""

    def __init__(self) -> None:
        self.now = START

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def stamp(self, after: float = 0) -> str:
        return timestamp(self.now + timedelta(seconds=after))


@dataclass(frozen=True)
class Change:
    """One write, as watches replay it: the object after it, and before it (for selectors)."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    kind: Kind
    obj: dict
    before: dict | None


class Store:
    def __init__(self, clock: Clock, seed: int = 0, history: int = 10_000) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.random = random.Random(seed)
        self.rv = 1
        self._objects: dict[tuple[str, str, str], dict] = {}
        self._uids: dict[str, tuple[str, str, str]] = {}
        self._changes: deque[Change] = deque(maxlen=history)
        self._compacted = 1  # changes after this version are all in _changes

    # Identifiers -------------------------------------------------------------------------

    def new_uid(self) -> str:
        return str(uuid.UUID(int=self.random.getrandbits(128), version=4))

    def suffix(self, length: int = 5) -> str:
        return "".join(self.random.choice(SAFE_CHARS) for _ in range(length))

    # Reads -------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> dict | None:
        found = self._objects.get((kind.plural, namespace if kind.namespaced else "", name))
        return copy.deepcopy(found) if found is not None else None

    def require(self, kind: Kind, namespace: str, name: str) -> dict:
        found = self.get(kind, namespace, name)
        if found is None:
            raise not_found(kind, name)
        return found

    def items(self, kind: Kind, namespace: str | None = None) -> list[dict]:
        """Every object of a kind (in one namespace, or all), in etcd's key order."""
        keys = sorted(
            key
            for key in self._objects
            if key[0] == kind.plural and (namespace is None or key[1] == namespace)
        )
        return [copy.deepcopy(self._objects[key]) for key in keys]

    def by_uid(self, uid: str) -> tuple[Kind, dict] | None:
        key = self._uids.get(uid)
        if key is None:
            return None
        return KINDS[key[0]], copy.deepcopy(self._objects[key])

    # Writes ------------------------------------------------------------------------------

    def create(self, kind: Kind, obj: dict) -> dict:
        meta = obj["metadata"]
        key = (kind.plural, meta.get("namespace", "") if kind.namespaced else "", meta["name"])
        if key in self._objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{kind.qualified} "{meta["name"]}" already exists',
                _details(kind, meta["name"]),
            )
        meta.setdefault("uid", self.new_uid())
        meta["creationTimestamp"] = self.clock.stamp()
        if kind.generation:
            meta["generation"] = 1
        stored = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        return self._write(kind, key, stored, None, "ADDED")

    def replace(self, kind: Kind, obj: dict) -> dict:
        """Stores `obj` over the object of its name; a write that changes nothing is skipped
        (no new resourceVersion, no watch event), as the API server skips no-op updates."""
        meta = obj["metadata"]
        key = (kind.plural, meta.get("namespace", "") if kind.namespaced else "", meta["name"])
        before = self._objects.get(key)
        if before is None:
            raise not_found(kind, meta["name"])
        meta["resourceVersion"] = before["metadata"]["resourceVersion"]
        if obj == before:
            return copy.deepcopy(before)
        return self._write(kind, key, copy.deepcopy(obj), before, "MODIFIED")

    def remove(self, kind: Kind, namespace: str, name: str) -> dict:
        """Deletes for good: the DELETED event carries the object at the deletion's version."""
        key = (kind.plural, namespace if kind.namespaced else "", name)
        before = self._objects.pop(key, None)
        if before is None:
            raise not_found(kind, name)
        del self._uids[before["metadata"]["uid"]]
        final = copy.deepcopy(before)
        return self._write(kind, None, final, before, "DELETED")

    def _write(
        self, kind: Kind, key: tuple | None, obj: dict, before: dict | None, change: str
    ) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if key is not None:
            self._objects[key] = obj
            self._uids[obj["metadata"]["uid"]] = key
        if len(self._changes) == self._changes.maxlen:
            self._compacted = self._changes[0].rv
        self._changes.append(Change(self.rv, change, kind, copy.deepcopy(obj), before))
        self.changed.notify_all()
        return copy.deepcopy(obj)

    # Watch history -----------------------------------------------------------------------

    def changes_after(self, rv: int) -> list[Change]:
        """What happened after version `rv`; 410 Gone once that history is compacted away."""
        if rv < self._compacted:
            raise gone(f"too old resource version: {rv} ({self._compacted})")
        return [change for change in self._changes if change.rv > rv]

    def compact(self) -> None:
        """Forgets every change so far, as etcd's compaction does."""
        self._changes.clear()
        self._compacted = self.rv
