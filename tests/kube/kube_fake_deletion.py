"""Deletion as the API server does it, and the garbage collector.

DELETE answers as the API server does: a pod (its registry returns the deleted object) comes
back as it stands, with metadata.deletionTimestamp and deletionGracePeriodSeconds when it is
deleted gracefully (bound to a node and not finished: the grace is the request's
gracePeriodSeconds, else the pod's terminationGracePeriodSeconds; the kubelet removes it once
the grace has passed); other objects come back as a Status Success naming them, or as the
object when it stays for its finalizers (propagationPolicy Foreground adds
`foregroundDeletion`).

The garbage collector deletes an object whose owners (ownerReferences, by uid) are all gone,
drops the references to gone owners while another owner remains, deletes the dependents of
an owner deleted in the foreground (in the foreground themselves when they have dependents),
and removes that owner once no dependent with blockOwnerDeletion remains. Orphan removes the
references to the deleted owner from its dependents.
"""

from __future__ import annotations

from kube_fake_store import KINDS, ApiError, Kind, Store, conflict

PODS = KINDS["pods"]
POLICIES = ("Orphan", "Background", "Foreground")
FOREGROUND = "foregroundDeletion"


def delete(
    store: Store,
    kind: Kind,
    namespace: str,
    name: str,
    policy: str | None = None,
    grace: int | None = None,
    preconditions: dict | None = None,
) -> dict:
    """Deletes as a DELETE request does; returns the response body."""
    obj = store.require(kind, namespace, name)
    _check(kind, obj, policy, preconditions)
    meta = obj["metadata"]
    if kind is PODS:
        return _delete_pod(store, obj, grace)
    if meta.get("deletionTimestamp"):
        return obj
    if policy == "Orphan":
        _orphan(store, meta["uid"])
    finalizers = list(meta.get("finalizers") or [])
    if policy == "Foreground":
        finalizers.append(FOREGROUND)
    if finalizers:
        meta.update(
            finalizers=finalizers,
            deletionTimestamp=store.clock.stamp(),
            deletionGracePeriodSeconds=0,
        )
        return store.replace(kind, obj)
    store.remove(kind, namespace, name)
    details = {"name": name, **({"group": kind.group} if kind.group else {})}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {**details, "kind": kind.plural, "uid": meta["uid"]},
    }


def _check(kind: Kind, obj: dict, policy: str | None, preconditions: dict | None) -> None:
    if policy is not None and policy not in POLICIES:
        raise ApiError(
            422,
            "Invalid",
            f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
            f'"{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
        )
    meta = obj["metadata"]
    for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        wanted = (preconditions or {}).get(field)
        if wanted is not None and wanted != meta[field]:
            raise conflict(
                kind,
                meta["name"],
                f'Operation cannot be fulfilled on {kind.qualified} "{meta["name"]}": '
                f"Precondition failed: {label} in precondition: {wanted}, {label} in object "
                f"meta: {meta[field]}",
            )


def _delete_pod(store: Store, pod: dict, grace: int | None) -> dict:
    meta, spec = pod["metadata"], pod["spec"]
    if grace is None:
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    if not spec.get("nodeName") or finished:
        grace = 0
    if meta.get("deletionTimestamp") and grace >= meta.get("deletionGracePeriodSeconds", 0):
        return pod  # deleting again may only shorten the grace
    if grace == 0:
        return store.remove(PODS, meta["namespace"], meta["name"])
    meta.update(deletionTimestamp=store.clock.stamp(after=grace), deletionGracePeriodSeconds=grace)
    return store.replace(PODS, pod)


def _everything(store: Store) -> list[tuple[Kind, dict]]:
    return [(kind, obj) for kind in KINDS.values() for obj in store.items(kind)]


def _orphan(store: Store, uid: str) -> None:
    for kind, obj in _everything(store):
        refs = obj["metadata"].get("ownerReferences") or []
        kept = [ref for ref in refs if ref.get("uid") != uid]
        if len(kept) != len(refs):
            obj["metadata"]["ownerReferences"] = kept
            if not kept:
                del obj["metadata"]["ownerReferences"]
            store.replace(kind, obj)


def collect_garbage(store: Store) -> None:
    everything = _everything(store)
    owners = {obj["metadata"]["uid"]: obj for _, obj in everything}
    dependents: dict[str, list[tuple[Kind, dict]]] = {}
    for kind, obj in everything:
        for ref in obj["metadata"].get("ownerReferences") or []:
            dependents.setdefault(ref.get("uid", ""), []).append((kind, obj))
    for kind, obj in everything:
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        if not refs or meta.get("deletionTimestamp"):
            continue
        states = [_state(owners.get(ref.get("uid", ""))) for ref in refs]
        if all(state in ("absent", "foreground") for state in states):
            policy = (
                "Foreground" if "foreground" in states and dependents.get(meta["uid"]) else None
            )
            delete(store, kind, meta.get("namespace", ""), meta["name"], policy)
        elif "absent" in states:
            meta["ownerReferences"] = [
                r for r, s in zip(refs, states, strict=True) if s != "absent"
            ]
            store.replace(kind, obj)
    for kind, obj in _everything(store):
        _finish_foreground(store, kind, obj)


def _state(owner: dict | None) -> str:
    if owner is None:
        return "absent"
    if FOREGROUND in (owner["metadata"].get("finalizers") or []):
        return "foreground"
    return "present"


def _finish_foreground(store: Store, kind: Kind, obj: dict) -> None:
    meta = obj["metadata"]
    if FOREGROUND not in (meta.get("finalizers") or []):
        return
    for _, other in _everything(store):
        for ref in other["metadata"].get("ownerReferences") or []:
            if ref.get("uid") == meta["uid"] and ref.get("blockOwnerDeletion"):
                return
    meta["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND]
    if meta["finalizers"]:
        store.replace(kind, obj)
    else:
        store.remove(kind, meta.get("namespace", ""), meta["name"])
