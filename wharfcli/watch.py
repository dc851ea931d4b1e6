"""`--wait`: follow a service until it settles, showing its progress and events as they come.

`verdict` is the pure part: given the service as the API shows it, is the wait over, and how?
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from wharfcli.client import NOT_FOUND, TIMED_OUT, Client, CliError

DONE, FAILED = "done", "failed"
POLL_S = 1.0


def verdict(service: dict, goal: str) -> str | None:
    """DONE, FAILED or None (not yet) for a service heading to `goal` (running or stopped)."""
    phase = service.get("phase")
    if phase == "failed" or "rollout paused" in (service.get("progress") or ""):
        return FAILED
    caught_up = (service.get("observed_generation") or 0) >= (service.get("generation") or 0)
    if goal == "stopped":
        return DONE if phase == "stopped" and caught_up else None
    if phase == "completed" or (phase == "running" and _job(service)):
        return DONE if caught_up else None  # a job runs (it is never ready), or has run
    ready = (service.get("ready_instances") or 0) >= (service.get("instances") or 0)
    return DONE if phase == "running" and caught_up and ready else None


def _job(service: dict) -> bool:
    """Whether the service is a job (metadata.workload_type), whose instances are never
    ready: they run their command to its end."""
    metadata = (service.get("spec") or {}).get("metadata") or {}
    return isinstance(metadata, dict) and metadata.get("workload_type") == "elasticjob"


def status_line(service: dict) -> str:
    line = f"{service.get('phase')}: {service.get('ready_instances')}/{service.get('instances')}"
    line += " ready"
    if service.get("progress"):
        line += f" - {service['progress']}"
    return line


class Follower:
    """Prints each new event and each change of the status line, once."""

    def __init__(self, client: Client, name: str, echo: Callable[[str], None]) -> None:
        self.client, self.name, self.echo = client, name, echo
        self.seen: set[int] = set()
        self.last_line = ""

    def skip_past_events(self) -> None:
        self.seen.update(e["id"] for e in self.client.get(f"services/{self.name}/events"))

    def events(self) -> list[dict]:
        fresh = [
            e for e in self.client.get(f"services/{self.name}/events") if e["id"] not in self.seen
        ]
        for event in sorted(fresh, key=lambda e: e["id"]):
            self.seen.add(event["id"])
            where = f" [{event['instance']}]" if event.get("instance") else ""
            when = event["created_at"][11:19]
            self.echo(f"  {when} {event['reason']}{where}: {event['message']}")
        return fresh

    def status(self, service: dict) -> None:
        line = status_line(service)
        if line != self.last_line:
            self.last_line = line
            self.echo(line)


def wait_for(client: Client, name: str, goal: str, timeout_s: float, follower: Follower) -> dict:
    """The settled service; CliError (exit 1) if it failed, (exit 6) past the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        service = client.get(f"services/{name}")
        follower.events()
        follower.status(service)
        outcome = verdict(service, goal)
        if outcome == DONE:
            return service
        if outcome == FAILED:
            reason = service.get("last_error") or service.get("progress") or "it failed"
            raise CliError(f"service {name} failed: {reason}")
        if time.monotonic() > deadline:
            raise CliError(
                f"gave up after {timeout_s:.0f} s; {name} is still {service.get('phase')}",
                TIMED_OUT,
            )
        time.sleep(POLL_S)


def wait_gone(client: Client, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:  # its events are readable until its last instance has stopped and it is gone
            events = client.get(f"services/{name}/events", limit=1)
        except CliError as exc:
            if exc.exit_code == NOT_FOUND:
                return
            raise
        if events:
            click.echo(f"{events[0]['reason']}: {events[0]['message']}", err=True)
        time.sleep(POLL_S)
    raise CliError(f"gave up after {timeout_s:.0f} s; {name} is still being deleted", TIMED_OUT)
