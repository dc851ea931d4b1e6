"""`wharf keys|usage|nodes`: API keys, what callers used, and the hosts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import click

from wharfcli.client import Client
from wharfcli.config import Config
from wharfcli.output import Column, emit, output_option, table

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def since_value(value: str | None, now: datetime) -> str | None:
    """`30m`, `6h`, `7d` (ago) as an ISO time; an ISO time as it is."""
    if value is None:
        return None
    if match := re.fullmatch(r"([0-9]{1,6})([smhd])", value):
        return (now - timedelta(**{UNITS[match[2]]: int(match[1])})).isoformat()
    return value  # the API checks it and names `since` if it is not a time


@click.group()
def keys() -> None:
    """API keys: tokens for callers, scoped to services, with their own limits."""


KEY_COLUMNS: list[Column] = [("ID", "id"), ("NAME", "name"), ("HINT", "hint"), ("STATE", "state"),
               ("SERVICES", lambda k: k["services"] or "all"), ("RPM", "rpm"), ("TPM", "tpm"),
               ("CONCURRENCY", "max_concurrency"), ("EXPIRES", "expires_at")]  # fmt: skip


@keys.command("create")
@click.option("--name", required=True)
@click.option("--service", "services", multiple=True, help="scope to it (repeat); default all")
@click.option("--expires-in", type=click.IntRange(1), help="seconds until it expires")
@click.option("--rpm", type=click.IntRange(1), help="requests per minute")
@click.option("--tpm", type=click.IntRange(1), help="tokens per minute")
@click.option("--max-concurrency", type=click.IntRange(1), help="requests in flight at once")
@output_option
def create_key(name, services, expires_in, rpm, tpm, max_concurrency) -> None:
    """Mint an API key; it is shown once."""
    body = {"name": name, "services": list(services) or None, "expires_in": expires_in,
            "rpm": rpm, "tpm": tpm, "max_concurrency": max_concurrency}  # fmt: skip
    answer = Client(Config.load()).post("keys", {k: v for k, v in body.items() if v is not None})
    emit(answer, text=f"key {answer['id']} ({answer['name']}): {answer['key']}  (shown once)")


@keys.command("list")
@output_option
def list_keys() -> None:
    """Your keys (every key, for staff)."""
    emit(Client(Config.load()).get("keys"), KEY_COLUMNS)


@keys.command("revoke")
@click.argument("key_id")
def revoke_key(key_id: str) -> None:
    """Revoke a key by its id (k7): callers using it are refused within a second."""
    Client(Config.load()).call("DELETE", f"keys/{key_id}")
    click.echo(f"key {key_id} revoked")


@click.command()
@click.option("--service", help="one service")
@click.option("--key", help="one key id (k7), or the service tokens' id")
@click.option("--since", help="ISO time or 30m, 6h, 7d (default: the API's, a day)")
@click.option("--until", help="ISO time (default now)")
@click.option("--group", type=click.Choice(["minute", "hour", "day"]), help="period of a row")
@output_option
def usage(service, key, since, until, group) -> None:
    """Requests and tokens used, totals and a series."""
    answer = Client(Config.load()).get(
        "usage", service=service, key=key, since=since_value(since, datetime.now(UTC)),
        until=until, group=group,
    )  # fmt: skip
    totals = answer["totals"]
    lines = [f"from {answer['since']} to {answer['until']}, by {answer['group']}",
             "totals: " + ", ".join(f"{k} {v}" for k, v in totals.items()), ""]  # fmt: skip
    columns = [("TIME", "time"), *[(k.upper(), k) for k in totals]]
    emit(answer, text="\n".join(lines) + table(answer["series"], columns))


@click.group()
def nodes() -> None:
    """The hosts that run instances."""


@nodes.command("list")
@output_option
def list_nodes() -> None:
    """Every node, its state and cards."""
    emit(Client(Config.load()).get("nodes"), [
        ("NAME", "name"), ("STATE", "state"), ("ADDRESS", "address"), ("CARDS", "card_counts"),
        ("CPUS", "cpus"), ("MEMORY MB", "memory_mb"), ("RUNTIME", "runtime"),
        ("INSTANCES", lambda n: len(n.get("instances") or [])), ("VERSION", "version"),
    ])  # fmt: skip


def _node_action(action: str, doc: str) -> click.Command:
    @click.argument("name")
    def command(name: str) -> None:
        node = Client(Config.load()).post(f"nodes/{name}/{action}")
        click.echo(f"node {name}: {node.get('state', action)}")

    command.__doc__ = doc
    return click.command(action)(command)


for _action, _doc in (
    ("cordon", "Place nothing new on a node."),
    ("uncordon", "Let a node take new instances again."),
    ("drain", "Cordon a node and move its instances elsewhere."),
):
    nodes.add_command(_node_action(_action, _doc))
