"""Wharf's services, instances, events and versions as EAS's OpenAPI answers them
(PascalCase, EAS's states and times). Built from the v1 API's own serializers, so both APIs
say the same things; only the shape differs."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.conf import settings

from contracts.eas.written import eas_form
from contracts.service_groups import STANDALONE
from controlplane.services.api.serializers import InstanceSerializer, ServiceSerializer
from controlplane.services.choices import DesiredState, InstanceState, Phase
from controlplane.services.models import Event, Instance, Service, ServiceVersion
from controlplane.services.secrets import redact

# A service's phase as EAS's Status names it.
SERVICE_STATUS = {
    Phase.PENDING: "Waiting", Phase.DEPLOYING: "Creating", Phase.RUNNING: "Running",
    Phase.UPDATING: "Updating", Phase.DEGRADED: "Running", Phase.STOPPING: "Stopping",
    Phase.STOPPED: "Stopped", Phase.DELETING: "Deleting", Phase.FAILED: "Failed",
    Phase.COMPLETED: "Completed",
}  # fmt: skip
# An instance's state as EAS's `w` shows it (its READY column is ReadyProcesses).
INSTANCE_STATUS = {
    InstanceState.CREATING: "Pending", InstanceState.STARTING: "Running",
    InstanceState.READY: "Running", InstanceState.UNHEALTHY: "Running",
    InstanceState.BACKOFF: "CrashLoopBackOff", InstanceState.FAILED: "Failed",
    InstanceState.UNKNOWN: "Unknown", InstanceState.DRAINING: "Terminating",
    InstanceState.SUCCEEDED: "Completed",
}  # fmt: skip
# Event reasons EAS would file as Warning rather than Normal.
WARNING_WORDS = ("Fail", "Unhealthy", "Error", "BackOff", "Crash", "Lost", "Killed", "Ignored")


def eas_time(when: datetime | None) -> str:
    return f"{when:%Y-%m-%dT%H:%M:%SZ}" if when else ""


def region() -> str:
    return settings.WHARF_EAS_REGION


def service_status(service: Service) -> str:
    if service.desired_state == DesiredState.DELETED:
        return "Deleting"
    return SERVICE_STATUS.get(Phase(service.phase), "Waiting")


def service_config(spec: dict) -> str:
    """The stored spec, secrets masked, as EAS writes it (a JSON string, as EAS's is)."""
    return json.dumps(eas_form(redact(spec)), sort_keys=True)


def service(found: Service) -> dict[str, Any]:
    shown = ServiceSerializer(found).data
    spec = found.spec if isinstance(found.spec, dict) else {}
    metadata = spec.get("metadata") or {}
    containers = spec.get("containers") or [{}]
    total, ready = shown["instances"], shown["ready_instances"]
    labels = spec.get("labels") or {}
    return {
        "ServiceName": found.name, "ServiceId": found.name, "ServiceUid": str(found.pk),
        "Region": region(), "WorkspaceId": found.workspace.name,
        "Status": service_status(found), "Message": found.last_error or found.progress,
        "Reason": "", "CreateTime": eas_time(found.created_at),
        "UpdateTime": eas_time(found.updated_at),
        "TotalInstance": total, "RunningInstance": ready,
        "PendingInstance": max(total - ready, 0),
        "Cpu": metadata.get("cpu") or 0, "Gpu": metadata.get("gpu") or 0,
        "Memory": metadata.get("memory") or 0, "Image": containers[0].get("image", ""),
        "CurrentVersion": shown["version"] or 0, "LatestVersion": shown["version"] or 0,
        "InternetEndpoint": shown["endpoints"]["eas"],
        "IntranetEndpoint": shown["endpoints"]["eas"],
        "ServiceConfig": service_config(spec),
        "Labels": [{"LabelKey": k, "LabelValue": str(v)} for k, v in sorted(labels.items())],
        "AccessToken": "",  # kept as a digest only: shown once, by CreateService
        **_group_fields(shown["group"]),
    }  # fmt: skip


def _group_fields(group: dict | None) -> dict[str, Any]:
    """Its service group (metadata.group) and its weight and traffic state there; outside a
    group, no group, weight 0 and standalone (it takes only its own endpoint's traffic)."""
    if group is None:
        return {"ServiceGroup": "", "Weight": 0, "TrafficState": STANDALONE}
    return {"ServiceGroup": group["name"], "Weight": group["weight"],
            "TrafficState": group["traffic_state"]}  # fmt: skip


def _host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0] if url else ""


def instance(found: Instance) -> dict[str, Any]:
    shown = InstanceSerializer(found).data
    state = InstanceState(found.state)
    return {
        "InstanceName": found.name, "Role": found.role, "Status": INSTANCE_STATUS[state],
        "ReadyProcesses": 1 if state == InstanceState.READY else 0, "TotalProcesses": 1,
        "RestartCount": shown["restarts"], "StartAt": eas_time(found.created_at),
        "HostName": found.node, "HostIP": _host(found.url), "InnerIP": _host(found.url),
        "Reason": found.message, "LastState": [],
    }  # fmt: skip


def event_type(reason: str) -> str:
    return "Warning" if any(word in reason for word in WARNING_WORDS) else "Normal"


def event(found: Event) -> dict[str, Any]:
    where = f"[{found.instance}] " if found.instance else ""
    return {"Time": eas_time(found.created_at), "Type": event_type(found.reason),
            "Reason": found.reason, "Message": where + found.message}  # fmt: skip


def version(found: ServiceVersion) -> dict[str, Any]:
    return {
        "ImageId": found.number, "BuildTime": eas_time(found.created_at),
        "Message": found.note, "ServiceConfig": service_config(found.spec),
        "ImageAvailable": "true", "ServiceRunnable": "true",
    }  # fmt: skip
