"""`wharf groups list|describe|weights` and `wharf services release`: service groups, one
endpoint over several services, split by ready instances (auto) or by weights (customized).

The CLI is installed alone (it is a client of the API), so the few values it checks before
asking are written here; the API (controlplane/services/api/groups.py) is their authority and
checks them again, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import click

from wharfcli.client import USAGE, CliError
from wharfcli.output import Column, as_json, emit, fields, output_option, table
from wharfcli.services import _client, services

MAX_WEIGHT = 1000
TRAFFIC_MODES = ("auto", "customized")
TRAFFIC_STATES = ("grouping", "standalone")
WEIGHT_ARGUMENT = re.compile(r"([^=\s]+)=([0-9]+)")


def parse_weights(arguments: Sequence[str]) -> dict[str, int]:
    """`a=90 b=10` as {member: weight}; a CliError (bad usage) naming the argument that is not
    NAME=INT, whose weight is outside 0-1000, or whose member was already given."""
    weights: dict[str, int] = {}
    for argument in arguments:
        match = WEIGHT_ARGUMENT.fullmatch(argument)
        if match is None:
            raise CliError(f"{argument!r}: write each weight as MEMBER=WEIGHT, e.g. a=90", USAGE)
        name, weight = match[1], int(match[2])
        if weight > MAX_WEIGHT:
            raise CliError(f"{argument!r}: a weight is 0-{MAX_WEIGHT}", USAGE)
        if name in weights:
            raise CliError(f"{argument!r}: {name} is given twice", USAGE)
        weights[name] = weight
    return weights


def percent(share: float) -> str:
    """A share (0-1) of the group's traffic as people read it: 90%, 33.3%, 0%."""
    return f"{share * 100:.1f}".removesuffix(".0") + "%"


def member_shares(group: dict) -> str:
    """`a=90%,b=10%`: each member's share now; a member not released, `c=standalone`."""
    return ",".join(f"{m['service']}={_member_share(m)}" for m in group["members"])


def _member_share(member: dict) -> str:
    return percent(member["share"]) if member["traffic_state"] == "grouping" else "standalone"


GROUP_COLUMNS: list[Column] = [("NAME", "name"), ("MODE", "traffic_mode"),
                               ("MEMBERS", member_shares),
                               ("ENDPOINT", lambda g: g["endpoints"]["eas"])]  # fmt: skip
MEMBER_COLUMNS: list[Column] = [("SERVICE", "service"), ("STATE", "traffic_state"),
                                ("WEIGHT", "weight"), ("READY", "ready_instances"),
                                ("SHARE", lambda m: percent(m["share"]))]  # fmt: skip


def group_text(group: dict) -> str:
    """A group for people: its settings, its endpoints, then a table of its members."""
    endpoints = group["endpoints"]
    head = {
        "name": group["name"],
        "workspace": group["workspace"],
        "traffic_mode": group["traffic_mode"],
        "session_header": group["session_header"],
        "eas": endpoints["eas"],
        "openai": f"{endpoints['openai']}  model={endpoints['model']}",
        "updated_at": group["updated_at"],
    }
    return fields(head) + "\n\nmembers:\n" + table(group["members"], MEMBER_COLUMNS)


def show_group(group: dict) -> None:
    emit(group, text=None if as_json() else group_text(group))


@click.group()
def groups() -> None:
    """Service groups: one endpoint (/api/predict/GROUP, model GROUP) over the services whose
    spec names it in metadata.group, split by ready instances or by weights."""


@groups.command("list")
@output_option
def list_groups() -> None:
    """Every group, its mode and each member's share of its traffic now."""
    emit(_client().get("groups"), GROUP_COLUMNS)


@groups.command("describe")
@click.argument("group")
@output_option
def describe_group(group: str) -> None:
    """A group: its mode, session header, endpoints and members."""
    show_group(_client().get(f"groups/{group}"))


@groups.command("weights")
@click.argument("group")
@click.argument("weights", nargs=-1, metavar="[MEMBER=WEIGHT]...")
@click.option("--mode", type=click.Choice(TRAFFIC_MODES),
              help="auto: by ready instances; customized: by weights (the default when weights "
              "are given)")  # fmt: skip
@click.option("--session-header", help="the header whose value keeps a session on one member")
@output_option
def set_weights(
    group: str, weights: tuple[str, ...], mode: str | None, session_header: str | None
) -> None:
    """Set members' weights (0-1000, applied together: `a=0 b=100` switches at once), the
    traffic mode or the session header."""
    body: dict = {"weights": parse_weights(weights)} if weights else {}
    if mode is not None:
        body["traffic_mode"] = mode
    if session_header is not None:
        body["session_header"] = session_header
    if not body:
        raise CliError("give MEMBER=WEIGHT arguments, --mode or --session-header", USAGE)
    show_group(_client().call("PATCH", f"groups/{group}", json=body))


@services.command("release")
@click.argument("name")
@click.option("--weight", type=click.IntRange(0, MAX_WEIGHT), help="its weight in its group")
@click.option("--traffic-state", type=click.Choice(TRAFFIC_STATES),
              help="grouping: it takes its group's traffic; standalone: only its own")  # fmt: skip
@output_option
def release(name: str, weight: int | None, traffic_state: str | None) -> None:
    """Release a service into its group's traffic, or out of it (EAS's ReleaseService).
    Prints the group."""
    given = {"weight": weight, "traffic_state": traffic_state}
    body = {k: v for k, v in given.items() if v is not None}
    if not body:
        raise CliError("give --weight, --traffic-state or both", USAGE)
    show_group(_client().post(f"services/{name}/release", body))
