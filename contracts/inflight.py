"""Requests in flight per instance, as each gateway reports them: how an instance is drained.

Redis layout: every gateway process writes its own report to ``wharf:inflight:<gateway id>``
(the id: random hex, new for each process) every ``REPORT_INTERVAL`` seconds, with an expiry
of ``REPORT_TTL`` seconds, so the report of a gateway that died is gone a few seconds later.
A gateway that stops cleanly deletes its key. The report, JSON::

    {
      "at": 1717000000.25,         # unix seconds when it was written
      "snapshot": 1717000000123,   # version of the routing snapshot the gateway serves
      "in_flight": {"qwen-0": 2},  # requests at each instance; instances with none left out
      "qps": {"qwen": 4.2},        # requests/s each service received over the last
                                   # QPS_WINDOW seconds; services with none left out
      "held": {"idle-svc": 3}      # requests held for a service with no instance (scaled to
                                   # zero), waiting for one to start; none left out
    }                              # ("qps" and "held" are left out when empty)

The autoscaler sums "qps", "in_flight" and "held" over the gateways' reports
(``service_load``).

An instance that left the routing snapshot keeps its entry for as long as the gateway still
has requests at it. Draining an instance: publish a snapshot without it (its version, in
milliseconds since the epoch, is when it was built: ``removed_at_ms``), then wait until
``drained(read_reports(client), name, removed_at_ms)`` before stopping it.

No Django here: the control plane and the gateway both import it.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

log = logging.getLogger(__name__)

INFLIGHT_PREFIX = "wharf:inflight:"
REPORT_INTERVAL = 0.5  # seconds between a gateway's reports
REPORT_TTL = 5  # seconds a report lives unless rewritten (an int: SET ... EX takes no fraction)
QPS_WINDOW = 10.0  # seconds a gateway's requests-per-second figure averages over


def new_gateway_id() -> str:
    """A gateway process's id in its report's key."""
    return secrets.token_hex(8)


def report_key(gateway_id: str, prefix: str = INFLIGHT_PREFIX) -> str:
    return prefix + gateway_id


def encode_report(
    at: float,
    snapshot: int,
    in_flight: dict[str, int],
    qps: dict[str, float] | None = None,
    held: dict[str, int] | None = None,
) -> str:
    """A report's JSON; instances and services with nothing to report are left out."""
    counts = {name: count for name, count in sorted(in_flight.items()) if count > 0}
    rates = {name: round(rate, 3) for name, rate in sorted((qps or {}).items()) if rate > 0}
    waiting = {name: count for name, count in sorted((held or {}).items()) if count > 0}
    report: dict[str, Any] = {"at": at, "snapshot": snapshot, "in_flight": counts}
    if rates:
        report["qps"] = rates
    if waiting:
        report["held"] = waiting
    return json.dumps(report)


def service_load(reports: list[dict]) -> tuple[dict[str, float], dict[str, int], dict[str, int]]:
    """Summed over the gateways: requests/s per service, requests in flight per instance and
    requests held per service. Malformed reports and entries are left out."""
    qps: dict[str, float] = {}
    in_flight: dict[str, int] = {}
    held: dict[str, int] = {}
    for report in reports:
        if not _well_formed(report):
            continue
        for name, count in report["in_flight"].items():
            in_flight[name] = in_flight.get(name, 0) + count
        for name, rate in _entries(report.get("qps")):
            if isinstance(rate, int | float) and not isinstance(rate, bool) and rate >= 0:
                qps[name] = qps.get(name, 0.0) + float(rate)
        for name, count in _entries(report.get("held")):
            if _is_count(count):
                held[name] = held.get(name, 0) + count
    return qps, in_flight, held


def _entries(value: Any) -> list[tuple[str, Any]]:
    if not isinstance(value, dict):
        return []
    return [(k, v) for k, v in value.items() if isinstance(k, str)]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _well_formed(report: Any) -> bool:
    if not isinstance(report, dict):
        return False
    snapshot, in_flight = report.get("snapshot"), report.get("in_flight")
    return (
        isinstance(snapshot, int)
        and not isinstance(snapshot, bool)
        and isinstance(in_flight, dict)
        and all(isinstance(name, str) and _is_count(n) for name, n in in_flight.items())
    )


def drained(reports: list[dict], instance: str, removed_at_ms: int) -> bool:
    """Whether no gateway can still have a request at `instance`, removed from routing by the
    snapshot of version `removed_at_ms`.

    True when every report serves that snapshot or a later one (so routes no new request
    there) and has nothing in flight to `instance`. No reports (no gateway running): True.
    A report of the wrong shape is left out (logged at debug level); this never raises.
    """
    for report in reports:
        if not _well_formed(report):
            log.debug("ignoring a malformed in-flight report: %r", report)
            continue
        if report["snapshot"] < removed_at_ms or report["in_flight"].get(instance, 0) > 0:
            return False
    return True


def read_reports(client, prefix: str = INFLIGHT_PREFIX) -> list[dict]:
    """Every live gateway's report, from a synchronous redis-py client (redis.Redis).

    Keys that expire between the SCAN and the MGET, and values that are not a JSON object,
    are skipped. Redis errors are raised: the caller cannot tell "drained" without Redis.
    """
    keys = list(dict.fromkeys(client.scan_iter(match=prefix + "*", count=100)))
    if not keys:
        return []
    try:
        values = client.mget(keys)
    except UnicodeDecodeError:
        # A client with decode_responses fails the whole MGET over one value that is not
        # UTF-8: read them one by one instead, that one left out.
        values = [_get_text(client, key) for key in keys]
    reports: list[dict] = []
    for key, raw in zip(keys, values, strict=True):
        if raw is None:
            continue  # expired since the scan
        try:
            report = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            log.debug("ignoring an unreadable in-flight report in %r", key)
            continue
        if isinstance(report, dict):
            reports.append(report)
        else:
            log.debug("ignoring an in-flight report that is not an object in %r", key)
    return reports


def _get_text(client, key) -> Any:
    try:
        return client.get(key)
    except UnicodeDecodeError:
        log.debug("ignoring an in-flight report that is not UTF-8 in %r", key)
        return None
