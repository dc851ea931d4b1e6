"""Checks a request to create an API key, collecting every bad field before answering."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from contracts.routing import ADAPTER_SEPARATOR
from contracts.spec import SpecError
from contracts.spec_facts import adapter_names
from contracts.spec_models import ADAPTER_NAME
from controlplane.services.choices import DesiredState
from controlplane.services.models import Service, ServiceGroup
from controlplane.tokens.api.errors import Invalid
from controlplane.tokens.api.values import echo, positive_int, text, timestamp

LIMITS = ("rpm", "tpm", "max_concurrency")
FIELDS = frozenset({"name", "services", "expires_at", "expires_in", *LIMITS})
MAX_NAME = 100  # ApiKey.name
MAX_SERVICES = 100  # services one key is scoped to; more is a key for every service (null)
MAX_SERVICE_NAME = 63  # Service.name
MAX_SCOPE_ENTRY = 128  # "<service>:<adapter>": a service name, ':' and an adapter name


class OtherFieldError(ValueError):
    """An error that belongs to another field than the one being checked."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("required: a short name that says what the key is for")
    return text(value.strip(), MAX_NAME)


def _services(value: Any, workspace) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ValueError(
            "a non-empty list of service names, or null for every service of the workspace"
        )
    if len(value) > MAX_SERVICES:
        raise ValueError(
            f"at most {MAX_SERVICES} services; null scopes a key to every service of the workspace"
        )
    for index, name in enumerate(value):
        try:
            text(name, MAX_SCOPE_ENTRY, "a service name, or 'service:adapter'")
            service, separator, adapter = name.partition(ADAPTER_SEPARATOR)
            text(service, MAX_SERVICE_NAME, "a service name")
            if separator and not re.fullmatch(ADAPTER_NAME, adapter):
                raise ValueError(f"{adapter!r} is no adapter name (letters, digits, '_', '.', '-')")
        except ValueError as exc:
            raise OtherFieldError(f"services[{index}]", str(exc)) from None
    names = list(dict.fromkeys(value))
    live = Service.objects.exclude(desired_state=DesiredState.DELETED).filter(workspace=workspace)
    wanted = {name.partition(ADAPTER_SEPARATOR)[0] for name in names}
    known = {s.name: s for s in live.filter(name__in=wanted)}
    # A service group's name scopes a key to the group's endpoint (contracts.service_groups).
    in_workspace = ServiceGroup.objects.filter(workspace=workspace, name__in=wanted)
    groups = set(in_workspace.values_list("name", flat=True))
    unknown = [name for name in names if name not in groups
               and name.partition(ADAPTER_SEPARATOR)[0] not in known]  # fmt: skip
    if unknown:  # another workspace's service is no more known than a missing one
        raise ValueError(f"no such service in workspace {workspace.name!r}: {', '.join(unknown)}")
    for index, name in enumerate(value):
        if name in groups:
            continue
        service, separator, adapter = name.partition(ADAPTER_SEPARATOR)
        try:
            has = adapter_names(known[service].parsed_spec()) if separator else ()
        except SpecError:  # stored before a rule tightened: it serves no adapter now
            has = ()
        if separator and adapter not in has:
            raise OtherFieldError(f"services[{index}]", f"service {service!r} has no adapter "
                                  f"{adapter!r} (it has: {', '.join(has) or 'none'})")  # fmt: skip
    return names


def _expires_at(data: dict, now: datetime) -> datetime | None:
    at, within = data.get("expires_at"), data.get("expires_in")
    if within is None:
        return None if at is None else _future(timestamp(at), now)
    if at is not None:
        raise OtherFieldError("expires_in", "give expires_at or expires_in, not both")
    try:
        return now + timedelta(seconds=positive_int(within))
    except ValueError as exc:
        raise OtherFieldError("expires_in", f"{exc} (seconds)") from None


def _future(when: datetime, now: datetime) -> datetime:
    if when <= now:
        raise ValueError("must be in the future")
    return when


def parse_key_request(data: Any, now: datetime, workspace) -> dict[str, Any]:
    """The ApiKey fields the request asks for, for a key of `workspace`; Invalid naming every
    bad field otherwise."""
    if not isinstance(data, dict):
        raise Invalid("key", {"body": ["expected a JSON object"]}, "; nothing was saved")
    checks: dict[str, Callable[[], Any]] = {
        "name": lambda: _name(data.get("name")),
        "services": lambda: _services(data.get("services"), workspace),
        "expires_at": lambda: _expires_at(data, now),
        **{limit: _optional(data.get(limit)) for limit in LIMITS},
    }
    fields, errors = {}, {echo(f): ["unknown field"] for f in sorted(set(data) - FIELDS)}
    for field, check in checks.items():
        try:
            fields[field] = check()
        except OtherFieldError as exc:
            errors[exc.field] = [str(exc)]
        except ValueError as exc:
            errors[field] = [str(exc)]
    if errors:
        raise Invalid("key", errors, "; nothing was saved")
    return fields


def _optional(value: Any) -> Callable[[], int | None]:
    return lambda: None if value is None else positive_int(value)
