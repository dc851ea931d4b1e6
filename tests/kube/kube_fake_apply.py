"""Server-side apply, as the API server does it for the objects Wharf applies.

Each field manager owns the fields its last applied configuration gave (lists count as one
field: their elements are not merged). An apply sets the fields it gives, removes the fields
the same manager gave last time and no longer gives (unless another manager also owns them),
and leaves every other field alone: the controllers' status, the defaults, other managers'
fields. A field another manager owns with a different value is a 409 Conflict unless the
apply is forced, which takes the field over. Ownership is reported in metadata.managedFields
(FieldsV1, lists as atomic fields).

A Secret's `stringData` is written into `data` (base64) and never stored; its ownership stays
on the `stringData` keys, so a key dropped from a later apply's stringData stays in `data`:
kubernetes/kubernetes#108008, reproduced on purpose since a real cluster behaves so.
"""

from __future__ import annotations

import base64
import binascii
import copy

from kube_fake_defaults import apply_defaults
from kube_fake_selectors import QUANTITY_ERROR, canonical_quantity
from kube_fake_store import KINDS, ApiError, Kind, Store, bad_request, conflict
from kube_fake_validation import validate

APPLIED_METADATA = ("labels", "annotations", "ownerReferences", "finalizers")
Path = tuple[str, ...]


def apply(
    store: Store,
    kind: Kind,
    namespace: str,
    name: str,
    body: object,
    manager: str | None,
    force: bool,
) -> tuple[dict, bool]:
    """Applies `body` for `manager`; returns the stored object and whether it was created."""
    if not manager:
        raise ApiError(
            422,
            "Invalid",
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
            "is required for apply patch",
        )
    applied = _applied(kind, namespace, name, body)
    current = store.get(kind, namespace, name)
    if kind.namespaced and store.get(KINDS["namespaces"], "", namespace) is None:
        raise ApiError(
            404,
            "NotFound",
            f'namespaces "{namespace}" not found',
            {"name": namespace, "kind": "namespaces"},
        )
    fields = _leaves(applied)
    owners = _owners(current) if current else {}
    if current is None:
        obj: dict = {"metadata": {"name": name}}
        if kind.namespaced:
            obj["metadata"]["namespace"] = namespace
    else:
        _take_over(kind, name, current, applied, fields, owners, manager, force)
        obj = copy.deepcopy(current)
        others = set().union(*(owned for who, owned in owners.items() if who != manager))
        for path in owners.get(manager, set()) - fields - others:
            _remove(obj, path)
    _merge(obj, applied)
    if kind.kind == "Secret":
        _write_string_data(obj)
    apply_defaults(kind, obj)
    validate(kind, obj, current)
    owners[manager] = fields
    _record_owners(obj, current, owners, kind, store)
    if current is None:
        return store.create(kind, obj), True
    if kind.generation and _bumps_generation(kind, obj, current):
        obj["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
    return store.replace(kind, obj), False


def _applied(kind: Kind, namespace: str, name: str, body: object) -> dict:
    """The applied configuration: what the manager sets, without the envelope."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request was in an unknown format")
    if body.get("kind") != kind.kind or body.get("apiVersion") != kind.api_version:
        raise bad_request(
            f"apiVersion and kind must be {kind.api_version} and {kind.kind} to apply "
            f"to {kind.qualified}, not {body.get('apiVersion')!r} and {body.get('kind')!r}"
        )
    meta = body.get("metadata") or {}
    if meta.get("name", name) != name:
        raise bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    if kind.namespaced and meta.get("namespace", namespace) != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    skipped = {"apiVersion", "kind", "metadata"} | ({"status"} if kind.status else set())
    applied = {key: copy.deepcopy(value) for key, value in body.items() if key not in skipped}
    kept = {key: copy.deepcopy(meta[key]) for key in APPLIED_METADATA if key in meta}
    if kept:
        applied["metadata"] = kept
    try:
        _canonical_quantities(applied)
    except ValueError:
        raise bad_request(
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
            f"{QUANTITY_ERROR}"
        ) from None
    return applied


def _canonical_quantities(node: object) -> None:
    """Resource quantities as the server writes them back ("1000m" -> "1")."""
    if isinstance(node, list):
        for item in node:
            _canonical_quantities(item)
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in ("requests", "limits") and isinstance(value, dict):
            node[key] = {name: canonical_quantity(amount) for name, amount in value.items()}
        elif key == "sizeLimit" and value is not None:
            node[key] = canonical_quantity(value)
        else:
            _canonical_quantities(value)


def _leaves(node: dict, prefix: Path = ()) -> set[Path]:
    """The fields a configuration sets; maps are walked, lists and empty maps are fields."""
    out: set[Path] = set()
    for key, value in node.items():
        if isinstance(value, dict) and value:
            out |= _leaves(value, (*prefix, key))
        else:
            out.add((*prefix, key))
    return out


def _get(node: object, path: Path) -> object:
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _remove(obj: dict, path: Path) -> None:
    parents = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # drop maps the removal left empty
        if parents[depth] or path[:depth] == ("metadata",):
            break
        parents[depth - 1].pop(path[depth - 1], None)


def _merge(obj: dict, applied: dict) -> None:
    for key, value in applied.items():
        if isinstance(value, dict) and value and isinstance(obj.get(key), dict):
            _merge(obj[key], value)
        else:
            obj[key] = copy.deepcopy(value)


def _take_over(
    kind: Kind,
    name: str,
    current: dict,
    applied: dict,
    fields: set[Path],
    owners: dict[str, set[Path]],
    manager: str,
    force: bool,
) -> None:
    """Finds the fields other managers own with another value: 409, or taken when forced."""
    clashes: dict[str, set[Path]] = {}
    for other, owned in owners.items():
        if other == manager:
            continue
        for field in owned:
            for mine in fields:
                short = min(field, mine, key=len)
                if short == field[: len(short)] == mine[: len(short)] and (
                    _get(current, short) != _get(applied, short)
                ):
                    clashes.setdefault(other, set()).add(field)
    if clashes and not force:
        causes = [
            {
                "reason": "FieldManagerConflict",
                "message": f'conflict with "{other}" using {kind.api_version}',
                "field": "." + ".".join(path),
            }
            for other, paths in sorted(clashes.items())
            for path in sorted(paths)
        ]
        count = len(causes)
        listed = "\n".join(f"- {c['message']}: {c['field']}" for c in causes)
        plural = "conflict" if count == 1 else "conflicts"
        raise conflict(kind, name, f"Apply failed with {count} {plural}: {listed}", causes)
    for other, paths in clashes.items():
        owners[other] -= paths


def _write_string_data(obj: dict) -> None:
    data = obj.setdefault("data", {})
    for key, value in (obj.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except binascii.Error:
            raise bad_request(
                f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data '
                f"at key {key}"
            ) from None
    if not data:
        obj.pop("data")


def _owners(obj: dict) -> dict[str, set[Path]]:
    def paths(node: dict, prefix: Path) -> set[Path]:
        children = {key[2:]: value for key, value in node.items() if key.startswith("f:")}
        if not children:
            return {prefix}
        return set().union(*(paths(value, (*prefix, key)) for key, value in children.items()))

    return {
        entry["manager"]: paths(entry["fieldsV1"], ())
        for entry in obj["metadata"].get("managedFields") or []
        if entry.get("operation") == "Apply"
    }


def _fields_v1(paths: set[Path]) -> dict:
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def _record_owners(obj: dict, current: dict | None, owners: dict, kind: Kind, store: Store) -> None:
    """Writes managedFields; an entry's time moves only when the apply changed something."""
    before = {e["manager"]: e for e in (current or {}).get("metadata", {}).get("managedFields", [])}
    unchanged = current is not None and _without_managed(obj) == _without_managed(current)
    entries = []
    for manager, paths in sorted(owners.items()):
        if not paths:
            continue
        entry = {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": kind.api_version,
            "time": store.clock.stamp(),
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(paths),
        }
        old = before.get(manager)
        if old and unchanged and old.get("fieldsV1") == entry["fieldsV1"]:
            entry["time"] = old["time"]
        entries.append(entry)
    entries += [e for e in before.values() if e.get("operation") != "Apply"]
    obj["metadata"]["managedFields"] = entries


def _without_managed(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("managedFields", "generation")}
    return {**obj, "metadata": meta}


def _bumps_generation(kind: Kind, obj: dict, current: dict) -> bool:
    """Spec changes bump a Deployment's generation, and so do its annotations' (the API
    server's deployment strategy: they are copied to its ReplicaSets); labels do not."""
    if obj.get("spec") != current.get("spec"):
        return True
    annotations = obj["metadata"].get("annotations"), current["metadata"].get("annotations")
    return kind.kind == "Deployment" and annotations[0] != annotations[1]
