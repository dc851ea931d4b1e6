"""`wharf workspaces|members|audit`: where services live, who may do what there, and who did
what. A token acts in one workspace; these show and change the one named."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from wharfcli.client import Client
from wharfcli.config import Config
from wharfcli.fleet import since_value
from wharfcli.output import Column, emit, output_option
from wharfcli.specs import read_spec

ROLES = click.Choice(["owner", "admin", "developer", "viewer"])
MEMBER_COLUMNS: list[Column] = [("USER", "user"), ("ROLE", "role"), ("SINCE", "since")]


@click.group()
def workspaces() -> None:
    """Workspaces: yours, with your role and quotas."""


@workspaces.command("list")
@output_option
def list_workspaces() -> None:
    """The workspaces you are a member of (every one, for staff)."""
    emit(Client(Config.load()).get("workspaces"),
         [("NAME", "name"), ("ROLE", "role"), ("MEMBERS", "members")])  # fmt: skip


@workspaces.command("describe")
@click.argument("workspace")
@output_option
def describe_workspace(workspace: str) -> None:
    """A workspace's quotas and what is used of them."""
    emit(Client(Config.load()).get(f"workspaces/{workspace}"))


@workspaces.command("quota")
@click.argument("workspace")
@click.option("--services", type=click.IntRange(0), help="services at most")
@click.option("--instances", type=click.IntRange(0), help="instances at most (running)")
@click.option("--gpu", type=click.IntRange(0), help="GPUs at most (running)")
@click.option("--npu", type=click.IntRange(0), help="NPUs at most (running)")
@click.option("--queued-items", type=click.IntRange(0),
              help="Async items and batch requests not yet answered, at most")  # fmt: skip
@click.option("--ceiling", is_flag=True, help="set the ceilings instead (staff): the quotas "
              "the workspace's admins set may not pass them")  # fmt: skip
@output_option
def set_quota(  # noqa: PLR0913 (one option per quota)
    workspace: str, services, instances, gpu, npu, queued_items, ceiling: bool
) -> None:
    """Set quotas (admins) or, with --ceiling, ceilings (staff); those not given are kept."""
    given = {"services": services, "instances": instances, "queued_items": queued_items}
    quotas = {k: v for k, v in given.items() if v is not None}
    cards = {k: v for k, v in {"gpu": gpu, "npu": npu}.items() if v is not None}
    if cards:
        quotas["cards"] = cards
    part = "ceilings" if ceiling else "quotas"
    emit(Client(Config.load()).call("PATCH", f"workspaces/{workspace}", json={part: quotas}))


@workspaces.command("grants")
@click.argument("workspace")
@click.option("-f", "--file", "grants_file", type=click.Path(allow_dash=True),
              help="set them (staff) from a JSON file; - reads stdin; what it leaves out is "
              "closed")  # fmt: skip
@output_option
def grants(workspace: str, grants_file: str | None) -> None:
    """What the workspace's specs may use of shared ground (host network, NFS, claims,
    storage endpoints, the platform's credentials, resource groups): show, or set."""
    client = Client(Config.load())
    if grants_file is None:
        emit(client.get(f"workspaces/{workspace}/grants"))
    else:
        emit(client.call("PUT", f"workspaces/{workspace}/grants", json=read_spec(grants_file)))


@click.group()
def members() -> None:
    """A workspace's members and their roles."""


@members.command("list")
@click.argument("workspace")
@output_option
def list_members(workspace: str) -> None:
    """Who is a member, with which role."""
    emit(Client(Config.load()).get(f"workspaces/{workspace}/members"), MEMBER_COLUMNS)


@members.command("add")
@click.argument("workspace")
@click.argument("user")
@click.option("--role", type=ROLES, required=True)
def add_member(workspace: str, user: str, role: str) -> None:
    """Add a user (admins; owners for an owner)."""
    Client(Config.load()).post(f"workspaces/{workspace}/members", {"user": user, "role": role})
    click.echo(f"{user} is {role} of {workspace}")


@members.command("set")
@click.argument("workspace")
@click.argument("user")
@click.option("--role", type=ROLES, required=True)
def set_member(workspace: str, user: str, role: str) -> None:
    """Change a member's role."""
    Client(Config.load()).call(
        "PATCH", f"workspaces/{workspace}/members/{user}", json={"role": role}
    )
    click.echo(f"{user} is {role} of {workspace}")


@members.command("remove")
@click.argument("workspace")
@click.argument("user")
def remove_member(workspace: str, user: str) -> None:
    """Remove a member: their tokens for the workspace stop working."""
    Client(Config.load()).call("DELETE", f"workspaces/{workspace}/members/{user}")
    click.echo(f"{user} removed from {workspace}")


@click.command()
@click.option("--service", help="one service")
@click.option("--actor", help="one user")
@click.option("--since", help="ISO time or 30m, 6h, 7d")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@output_option
def audit(service, actor, since, limit) -> None:
    """Who changed what in the workspace, newest first."""
    entries = Client(Config.load()).get(
        "audit", service=service, actor=actor, since=since_value(since, datetime.now(UTC)),
        limit=limit,
    )  # fmt: skip
    emit(entries, [("AT", "at"), ("ACTOR", "actor"), ("VIA", "via"), ("ACTION", "action"),
                   ("STATUS", "status")])  # fmt: skip
