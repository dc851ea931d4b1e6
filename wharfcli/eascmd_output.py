"""eascmd's output, pure: its boxed tables and what each column holds when Wharf answers.

REGION is the service's workspace (what a token's listing is scoped to, as a region scopes
EAS's); WEIGHT is the service's weight in its service group (metadata.group, 0-1000; 0 outside
a group); STATUS is Wharf's phase, capitalised.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

LIST_HEADER = ["SERVICENAME", "REGION", "INSTANCE", "CREATETIME", "UPDATETIME", "STATUS",
               "WEIGHT", "SERVICEPATH"]  # fmt: skip
WORKER_HEADER = ["INSTANCENAME", "INNERIP", "HOSTIP", "STARTAT", "RESTARTS", "STATUS", "READY",
                 "REASON", "LASTSTATE"]  # fmt: skip
MASKED = "******"
REASON_WIDTH = 60  # an instance's message can be an engine's last log lines


def boxed(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None) -> str:
    """An ASCII table as eascmd prints it: `+---+` rules, `|` between cells, a centred header;
    a cell with several lines (a JSON document) spans as many table lines."""
    texts = [[str(c).splitlines() or [""] for c in row] for row in rows]
    head = [[h] for h in header] if header else None
    columns = len(header) if header else max((len(r) for r in texts), default=0)
    widths = [0] * columns
    for row in ([head] if head else []) + texts:
        for i, lines in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in lines))
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [rule]
    if head:
        centred = (f" {h[0].center(w)} " for h, w in zip(head, widths, strict=True))
        out.append("|" + "|".join(centred) + "|")
        out.append(rule)
    for row in texts:
        for n in range(max(len(lines) for lines in row)):
            cells = [(lines[n] if n < len(lines) else "").ljust(w) for lines, w in
                     zip(row, widths, strict=True)]  # fmt: skip
            out.append("| " + " | ".join(cells) + " |")
    out.append(rule)
    return "\n".join(out)


def when(stamp: str | None) -> str:
    """An API timestamp (ISO 8601) as eascmd shows one: `2026-01-05 14:03:22`, local time."""
    if not stamp:
        return "-"
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return stamp


def status(service: dict) -> str:
    return str(service.get("phase") or "unknown").capitalize()


def weight(service: dict) -> int:
    """Its weight in its service group (the v1 answer's `group`: name, traffic_state, weight);
    0 outside a group."""
    return int((service.get("group") or {}).get("weight", 0))


def list_row(service: dict) -> list[Any]:
    return [service["name"], service.get("workspace") or "-", service.get("instances", 0),
            when(service.get("created_at")), when(service.get("updated_at")), status(service),
            weight(service), f"/api/predict/{service['name']}"]  # fmt: skip


def worker_row(instance: dict) -> list[Any]:
    """One instance: INNERIP is where the gateway reaches it, HOSTIP its node's name, STATUS
    its state, READY `[1/1]` while it passes readiness."""
    address = urlsplit(instance.get("url") or "").netloc or "-"
    ready = "[1/1]" if instance.get("state") == "ready" else "[0/1]"
    reason = " ".join((instance.get("message") or "").split())
    if len(reason) > REASON_WIDTH:
        reason = reason[: REASON_WIDTH - 3] + "..."
    last = {"restartAt": instance["restart_at"]} if instance.get("restart_at") else {}
    return [instance["name"], address, instance.get("node") or "-",
            when(instance.get("created_at")), instance.get("restarts", 0),
            str(instance.get("state") or "-").capitalize(), ready, reason or "-",
            json.dumps(last)]  # fmt: skip


def _image(eas_spec: dict) -> str:
    containers = eas_spec.get("containers") or []
    if containers and isinstance(containers[0], dict) and containers[0].get("image"):
        return str(containers[0]["image"])
    llm = eas_spec.get("llm") or {}
    return f"(engine {llm['engine']})" if llm.get("engine") else "-"


def describe_rows(service: dict, eas_spec: dict, versions: list[dict]) -> list[list[Any]]:
    """`desc`'s key/value rows: the service, its spec as EAS writes it, its versions."""
    metadata = eas_spec.get("metadata") or {}
    total, ready = service.get("instances", 0), service.get("ready_instances", 0)
    endpoints = service.get("endpoints") or {}
    memory = metadata.get("memory")
    return [
        ["Status", status(service)],
        ["ServiceName", service["name"]],
        ["Region", service.get("workspace") or "-"],
        ["CreateTime", when(service.get("created_at"))],
        ["UpdateTime", when(service.get("updated_at"))],
        ["AccessToken", service.get("token") or MASKED],
        ["TotalInstance", total],
        ["RunningInstance", ready],
        ["PendingInstance", max(total - ready, 0)],
        ["CPU", metadata.get("cpu", "-")],
        ["GPU", metadata.get("gpu", 0)],
        ["Memory", f"{memory}M" if memory is not None else "-"],
        ["Image", _image(eas_spec)],
        ["LatestVersion", max((v["number"] for v in versions), default="-")],
        ["CurrentVersion", service.get("version") or "-"],
        ["Message", service.get("last_error") or service.get("progress") or "-"],
        ["Endpoints", "\n".join(f"{k}: {v}" for k, v in endpoints.items()) or "-"],
        ["ServiceConfig", json.dumps(eas_spec, indent=2)],
    ]


def endpoint_rows(service: dict) -> list[list[Any]]:
    """What `create` prints first, as eascmd's table of endpoints and the token."""
    endpoints = service.get("endpoints") or {}
    return [["Internet Endpoint", endpoints.get("eas", "-")],
            ["OpenAI Endpoint", f"{endpoints.get('openai', '-')} (model {endpoints.get('model')})"],
            ["Token", service.get("token") or MASKED]]  # fmt: skip


def waiting_line(service: dict) -> str:
    """eascmd's `[OK] Waiting [Total: 2, Pending: 1, Running: 1]`, with Wharf's phase in place
    of `Waiting` and its progress where it says more."""
    total, ready = service.get("instances", 0), service.get("ready_instances", 0)
    line = f"[OK] {status(service)} [Total: {total}, Pending: {max(total - ready, 0)}, "
    line += f"Running: {ready}]"
    return line + (f" {service['progress']}" if service.get("progress") else "")
