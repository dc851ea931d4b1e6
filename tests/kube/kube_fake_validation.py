"""The API server's validation of what Wharf applies: the 422 Invalid answers (with the
messages Kubernetes writes) for mistakes a renderer can make. Not every rule of Kubernetes is
here; the ones about names, labels, owner references, Deployments, pod templates, resources,
volumes, ConfigMap and Secret keys are."""

from __future__ import annotations

import json
import re
from decimal import Decimal

from kube_fake_selectors import match_labels, parse_quantity
from kube_fake_store import Kind, invalid

Error = tuple[str, str, str]  # field, cause reason, message

_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_CONFIG_KEY = r"[-._a-zA-Z0-9]+"
_ENV_NAME = r"[-._a-zA-Z][-._a-zA-Z0-9]*"
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    f"used for validation is '{_SUBDOMAIN}')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{_LABEL}')"
)
PERCENT_MESSAGE = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
    "'93%', regex used for validation is '[0-9]+%')"
)
PORT_NAME_MESSAGE = "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
ENV_NAME_MESSAGE = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', "
    "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
    f"'MyEnvName1', regex used for validation is '{_ENV_NAME}')"
)
_STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}
_MAX_DATA = 1024 * 1024


def _value(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def bad(where: str, value: object, message: str) -> Error:
    return where, "FieldValueInvalid", f"Invalid value: {_value(value)}: {message}"


def required(where: str, detail: str = "") -> Error:
    return where, "FieldValueRequired", "Required value" + (f": {detail}" if detail else "")


def unsupported(where: str, value: object, *supported: str) -> Error:
    listed = ", ".join(json.dumps(option) for option in supported)
    message = f"Unsupported value: {_value(value)}: supported values: {listed}"
    return where, "FieldValueNotSupported", message


def duplicate(where: str, value: object) -> Error:
    return where, "FieldValueDuplicate", f"Duplicate value: {_value(value)}"


def validate(kind: Kind, obj: dict, old: dict | None) -> None:
    errors = _metadata(obj["metadata"])
    if kind.kind == "Deployment":
        errors += _deployment(obj.get("spec") or {}, (old or {}).get("spec"))
    elif kind.kind in ("ConfigMap", "Secret"):
        errors += _data(kind, obj, old)
    if errors:
        raise invalid(kind, obj["metadata"]["name"], errors)


def _is(pattern: str, text: object) -> bool:
    return isinstance(text, str) and re.fullmatch(pattern, text) is not None


def _metadata(meta: dict) -> list[Error]:
    errors: list[Error] = []
    name = meta["name"]
    if not _is(_SUBDOMAIN, name) or len(name) > 253:
        errors.append(bad("metadata.name", name, SUBDOMAIN_MESSAGE))
    errors += labels_errors("metadata.labels", meta.get("labels") or {})
    for key in meta.get("annotations") or {}:
        errors += _key_errors("metadata.annotations", key)
    refs = meta.get("ownerReferences") or []
    for i, ref in enumerate(refs):
        for field in ("apiVersion", "kind", "name"):
            if not ref.get(field):
                errors.append(required(f"metadata.ownerReferences[{i}].{field}"))
        if not ref.get("uid"):
            errors.append(bad(f"metadata.ownerReferences[{i}].uid", "", "uid must not be empty"))
    if sum(1 for ref in refs if ref.get("controller")) > 1:
        errors.append(
            bad(
                "metadata.ownerReferences",
                refs,
                "Only one reference can have Controller set to true",
            )
        )
    return errors


def _key_errors(where: str, key: object) -> list[Error]:
    text = str(key)
    prefix, _, name = text.rpartition("/")
    if (
        not _is(_NAME_PART, name)
        or len(name) > 63
        or (prefix and (not _is(_SUBDOMAIN, prefix) or len(prefix) > 253))
    ):
        message = (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            f"'123-abc', regex used for validation is '{_NAME_PART}') with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        )
        return [bad(where, text, message)]
    return []


def labels_errors(where: str, labels: dict) -> list[Error]:
    errors: list[Error] = []
    for key, value in labels.items():
        errors += _key_errors(where, key)
        if not isinstance(value, str) or not _is(_LABEL_VALUE, value) or len(value) > 63:
            message = (
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                f"'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                f"'{_LABEL_VALUE}')"
            )
            if isinstance(value, str) and len(value) > 63:
                message = "must be no more than 63 characters"
            errors.append(bad(where, value, message))
    return errors


def _data(kind: Kind, obj: dict, old: dict | None) -> list[Error]:
    errors: list[Error] = []
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    for field, entries in (("data", data), ("binaryData", binary)):
        for key, value in entries.items():
            if not _is(_CONFIG_KEY, key) or len(key) > 253:
                message = (
                    "a valid config key must consist of alphanumeric characters, '-', '_' or "
                    "'.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for "
                    f"validation is '{_CONFIG_KEY}')"
                )
                errors.append(bad(f"{field}[{key}]", key, message))
            if not isinstance(value, str):
                errors.append(bad(f"{field}[{key}]", value, "must be a string"))
    for key in set(data) & set(binary):
        errors.append(bad(f"data[{key}]", key, "duplicate of key present in binaryData"))
    size = sum(len(str(k)) + len(str(v)) for k, v in (data | binary).items())
    if size > _MAX_DATA:
        errors.append(
            ("data", "FieldValueTooLong", f"Too long: may not be more than {_MAX_DATA} bytes")
        )
    if kind.kind == "Secret" and old is not None and old.get("type") != obj.get("type"):
        errors.append(bad("type", obj.get("type"), "field is immutable"))
    return errors


def _deployment(spec: dict, old: dict | None) -> list[Error]:
    errors: list[Error] = []
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector:
        errors.append(required("spec.selector"))
    elif not selector.get("matchLabels") and not selector.get("matchExpressions"):
        errors.append(bad("spec.selector", selector, "empty selector is invalid for deployment"))
    elif not match_labels(selector, labels):
        errors.append(
            bad(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        )
    else:
        errors += labels_errors("spec.selector.matchLabels", selector.get("matchLabels") or {})
    if old is not None and old.get("selector") != selector:
        errors.append(bad("spec.selector", selector, "field is immutable"))
    errors += labels_errors("spec.template.metadata.labels", labels)
    for field in ("replicas", "revisionHistoryLimit", "minReadySeconds"):
        if int(spec.get(field) or 0) < 0:
            errors.append(bad(f"spec.{field}", spec[field], "must be greater than or equal to 0"))
    if int(spec.get("progressDeadlineSeconds", 600)) <= int(spec.get("minReadySeconds") or 0):
        errors.append(
            bad(
                "spec.progressDeadlineSeconds",
                spec["progressDeadlineSeconds"],
                "must be greater than minReadySeconds",
            )
        )
    errors += _strategy(spec.get("strategy") or {})
    template_spec = (spec.get("template") or {}).get("spec") or {}
    return errors + pod_spec_errors("spec.template.spec", template_spec)


def _strategy(strategy: dict) -> list[Error]:
    kind, rolling = strategy.get("type"), strategy.get("rollingUpdate") or {}
    if kind not in ("RollingUpdate", "Recreate"):
        return [unsupported("spec.strategy.type", kind, "Recreate", "RollingUpdate")]
    if kind == "Recreate":
        if "rollingUpdate" in strategy:
            message = "Forbidden: may not be specified when strategy `type` is 'Recreate'"
            return [("spec.strategy.rollingUpdate", "FieldValueForbidden", message)]
        return []
    errors: list[Error] = []
    for field in ("maxSurge", "maxUnavailable"):
        value, where = rolling.get(field), f"spec.strategy.rollingUpdate.{field}"
        if isinstance(value, str) and not re.fullmatch(r"[0-9]+%", value):
            errors.append(bad(where, value, PERCENT_MESSAGE))
        elif isinstance(value, int) and value < 0:
            errors.append(bad(where, value, "must be greater than or equal to 0"))
    if rolling.get("maxSurge") in (0, "0%") and rolling.get("maxUnavailable") in (0, "0%"):
        where = "spec.strategy.rollingUpdate.maxUnavailable"
        errors.append(bad(where, rolling["maxUnavailable"], "may not be 0 when `maxSurge` is 0"))
    return errors


def pod_spec_errors(where: str, spec: dict) -> list[Error]:
    errors: list[Error] = []
    containers, inits = spec.get("containers") or [], spec.get("initContainers") or []
    if not containers:
        errors.append(required(f"{where}.containers"))
    if spec.get("restartPolicy") != "Always":
        errors.append(unsupported(f"{where}.restartPolicy", spec.get("restartPolicy"), "Always"))
    grace = spec.get("terminationGracePeriodSeconds")
    if int(grace or 0) < 0:
        errors.append(
            bad(
                f"{where}.terminationGracePeriodSeconds",
                grace,
                "must be greater than or equal to 0",
            )
        )
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        errors += _unique_label(f"{where}.volumes[{i}].name", volume.get("name", ""), volumes)
    names: set[str] = set()
    for field, group in (("initContainers", inits), ("containers", containers)):
        for i, container in enumerate(group):
            at = f"{where}.{field}[{i}]"
            errors += _unique_label(f"{at}.name", container.get("name", ""), names)
            errors += _container(at, container, volumes)
    return errors


def _unique_label(where: str, name: str, seen: set[str]) -> list[Error]:
    if not _is(_LABEL, name) or len(name) > 63:
        return [bad(where, name, LABEL_MESSAGE)]
    if name in seen:
        return [duplicate(where, name)]
    seen.add(name)
    return []


def _container(at: str, container: dict, volumes: set[str]) -> list[Error]:
    errors: list[Error] = []
    if not container.get("image"):
        errors.append(required(f"{at}.image"))
    errors += _ports(at, container.get("ports") or [])
    for i, env in enumerate(container.get("env") or []):
        if not _is(_ENV_NAME, env.get("name")):
            errors.append(bad(f"{at}.env[{i}].name", env.get("name"), ENV_NAME_MESSAGE))
        ref = (env.get("valueFrom") or {}).get("secretKeyRef")
        if isinstance(ref, dict):
            where = f"{at}.env[{i}].valueFrom.secretKeyRef"
            errors += [
                required(f"{where}.{field}") for field in ("name", "key") if not ref.get(field)
            ]
    paths: set[str] = set()
    for i, mount in enumerate(container.get("volumeMounts") or []):
        name, path = mount.get("name"), mount.get("mountPath")
        if name not in volumes:
            where = f"{at}.volumeMounts[{i}].name"
            errors.append((where, "FieldValueNotFound", f"Not found: {_value(name)}"))
        if not path:
            errors.append(required(f"{at}.volumeMounts[{i}].mountPath"))
        elif path in paths:
            errors.append(bad(f"{at}.volumeMounts[{i}].mountPath", path, "must be unique"))
        paths.add(path or "")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        given = container.get(probe)
        handlers = [h for h in ("exec", "httpGet", "tcpSocket", "grpc") if (given or {}).get(h)]
        if probe in container and len(handlers) != 1:
            errors.append(required(f"{at}.{probe}", "must specify a handler type"))
    return errors + _resources(f"{at}.resources", container.get("resources") or {})


def _ports(at: str, ports: list[dict]) -> list[Error]:
    errors: list[Error] = []
    names: set[str] = set()
    for i, port in enumerate(ports):
        number, name = port.get("containerPort"), port.get("name")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            where = f"{at}.ports[{i}].containerPort"
            errors.append(bad(where, number, "must be between 1 and 65535, inclusive"))
        if name is None:
            continue
        if len(name) > 15:
            errors.append(bad(f"{at}.ports[{i}].name", name, "must be no more than 15 characters"))
        elif not re.fullmatch(_LABEL, name) or "--" in name:
            errors.append(bad(f"{at}.ports[{i}].name", name, PORT_NAME_MESSAGE))
        elif name in names:
            errors.append(duplicate(f"{at}.ports[{i}].name", name))
        names.add(name)
    return errors


def _resources(at: str, resources: dict) -> list[Error]:
    errors: list[Error] = []
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    amounts: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for field, given in (("requests", requests), ("limits", limits)):
        for name, quantity in given.items():
            standard = name in _STANDARD_RESOURCES or name.startswith("hugepages-")
            if not standard and "/" not in name:
                message = "must be a standard resource type or fully qualified"
                errors.append(bad(f"{at}.{field}[{name}]", name, message))
                continue
            amounts[field][name] = parse_quantity(quantity)[0]
    for name, request in amounts["requests"].items():
        limit = amounts["limits"].get(name)
        if "/" in name:  # extended resources (cards): whole, and requested as limited
            if request != request.to_integral_value():
                errors.append(bad(f"{at}.requests[{name}]", requests[name], "must be an integer"))
            if limit is None:
                message = "Limit must be set for non overcommitable resources"
                errors.append(required(f"{at}.limits", message))
            elif limit != request:
                message = f"must be equal to {name} limit of {limits[name]}"
                errors.append(bad(f"{at}.requests", requests[name], message))
        elif limit is not None and request > limit:
            message = f"must be less than or equal to {name} limit of {limits[name]}"
            errors.append(bad(f"{at}.requests", requests[name], message))
    for name, limit in amounts["limits"].items():
        if "/" in name and limit != limit.to_integral_value():
            errors.append(bad(f"{at}.limits[{name}]", limits[name], "must be an integer"))
    return errors
