"""`wharf services logs|events|token|versions|rollback`."""

from __future__ import annotations

import time

import click

from wharfcli.client import USAGE, CliError
from wharfcli.output import emit, output_option
from wharfcli.services import _client, services, show
from wharfcli.watch import Follower

FOLLOW_POLL_S = 2.0
EVENT_COLUMNS = [("TIME", "created_at"), ("REASON", "reason"), ("INSTANCE", "instance"),
                 ("MESSAGE", "message")]  # fmt: skip


def new_lines(old: list[str], new: list[str]) -> list[str]:
    """The lines of a fresh tail `new` that follow what `old` (the previous tail) ended with."""
    for overlap in range(min(len(old), len(new)), 0, -1):
        if new[:overlap] == old[-overlap:]:
            return new[overlap:]
    return new


@services.command("logs")
@click.argument("name")
@click.option("--instance", "-i", help="one instance (default: every instance)")
@click.option("--tail", default=200, show_default=True, type=click.IntRange(1, 10000))
@click.option("--follow", "-f", is_flag=True, help="keep printing new lines (Ctrl-C ends)")
def logs(name: str, instance: str | None, tail: int, follow: bool) -> None:
    """An instance's engine log, read from the node it runs on."""
    client = _client()
    names = [i["name"] for i in client.get(f"services/{name}/instances")]
    if instance is not None and instance not in names:
        raise CliError(f"{name} has no instance {instance!r}; it has {', '.join(names) or 'none'}",
                       USAGE)  # fmt: skip
    chosen = [instance] if instance else names
    if not chosen:
        raise CliError(f"{name} has no instances now")
    seen: dict[str, list[str]] = {}
    try:
        while True:
            for one in chosen:
                text = client.get(f"services/{name}/instances/{one}/logs", tail=tail)["logs"]
                lines = text.splitlines()
                prefix = f"[{one}] " if len(chosen) > 1 else ""
                for line in new_lines(seen.get(one, []), lines):
                    click.echo(prefix + line)
                seen[one] = lines
            if not follow:
                return
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return


@services.command("events")
@click.argument("name")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option("--watch", "-w", is_flag=True, help="keep printing new events (Ctrl-C ends)")
@output_option
def events(name: str, limit: int, watch: bool) -> None:
    """A service's events, oldest first."""
    client = _client()
    found = client.get(f"services/{name}/events", limit=limit)[::-1]
    if not watch:
        emit(found, EVENT_COLUMNS)
        return
    follower = Follower(client, name, click.echo)
    try:
        while True:
            follower.events()
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return


@services.group("token")
def token() -> None:
    """The service token callers present to the gateway."""


@token.command("rotate")
@click.argument("name")
@output_option
def rotate(name: str) -> None:
    """Replace the service token: the old one stops working at once."""
    client = _client()
    answer = client.post(f"services/{name}/token")
    client.config.remember_service_token(name, answer["token"])
    emit(answer, text=f"new token for {name}: {answer['token']}  (shown once; kept for wharf call)")


@services.command("versions")
@click.argument("name")
@output_option
def versions(name: str) -> None:
    """Every spec version of a service, newest first."""
    rows = _client().get(f"services/{name}/versions")
    emit(rows, [("VERSION", "number"), ("CURRENT", "current"), ("CREATED", "created_at"),
                ("NOTE", "note"), ("SPEC HASH", "spec_hash")])  # fmt: skip


@services.command("rollback")
@click.argument("name")
@click.option("--version", "number", type=click.IntRange(1), help="default: the one before")
@output_option
def rollback(name: str, number: int | None) -> None:
    """Make an earlier version's spec current again (as a new version)."""
    body = {} if number is None else {"version": number}
    show(_client().post(f"services/{name}/rollback", body))
