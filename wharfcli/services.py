"""`wharf services ...`: create, inspect, change and remove services."""

from __future__ import annotations

import click

from wharfcli.client import Client
from wharfcli.config import Config
from wharfcli.output import Column, as_json, emit, fields, output_option, table
from wharfcli.specs import read_spec, set_instances, spec_option
from wharfcli.watch import Follower, wait_for, wait_gone

WAIT_HELP = "follow its progress until it is running (exit 1 if it fails, 6 past --timeout)"
SERVICE_COLUMNS: list[Column] = [
    ("NAME", "name"), ("STATE", "desired_state"), ("PHASE", "phase"),
    ("READY", lambda s: f"{s['ready_instances']}/{s['instances']}"),
    ("VERSION", "version"), ("MODEL", lambda s: s["endpoints"]["model"]),
    ("PROGRESS", "progress"),
]  # fmt: skip


def wait_options(command):
    command = click.option("--wait", is_flag=True, help=WAIT_HELP)(command)
    return click.option(
        "--timeout", default=1800.0, show_default=True, help="seconds --wait waits"
    )(command)


def show(service: dict) -> None:
    """One service: the object for scripts, a one-line table for people."""
    emit(service, text=None if as_json() else table([service], SERVICE_COLUMNS))


def _client() -> Client:
    return Client(Config.load())


def _follow(client: Client, name: str, goal: str, timeout: float, skip_past: bool) -> dict:
    follower = Follower(client, name, lambda line: click.echo(line, err=True))
    if skip_past:
        follower.skip_past_events()
    return wait_for(client, name, goal, timeout, follower)


@click.group()
def services() -> None:
    """Create, inspect, change and remove services."""


@services.command("create")
@spec_option
@wait_options
@output_option
def create(spec_file: str, wait: bool, timeout: float) -> None:
    """Deploy a service from its spec. Prints its endpoints and its token (shown once; also
    kept in wharf's config for `wharf call`)."""
    client = _client()
    service = client.post("services", read_spec(spec_file))
    client.config.remember_service_token(service["name"], service["token"])
    _warn(service)
    if wait:
        service = {**_follow(client, service["name"], "running", timeout, False),
                   "token": service["token"]}  # fmt: skip
    emit(service, text=_created(service))


def _warn(service: dict) -> None:
    """The fields the API took but which have no effect here (EAS's cloud-only ones), and
    what an EAS instance type filled in, on stderr, one line each."""
    for warning in service.get("warnings") or []:
        click.echo(f"warning: {warning['field']}: {warning['message']}", err=True)
    for note in service.get("notes") or []:
        click.echo(f"note: {note['field']}: {note['message']}", err=True)


def _created(service: dict) -> str:
    endpoints = service["endpoints"]
    return "\n".join([
        f"service {service['name']} {service['phase']} (version {service['version']})",
        f"token:  {service['token']}  (shown once; kept for `wharf call`)",
        f"openai: {endpoints['openai']}  model={endpoints['model']}",
        f"eas:    {endpoints['eas']}",
    ])  # fmt: skip


@services.command("list")
@click.option("--phase", help="only services in this phase (running, failed, ...)")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="only services with this label (repeat: all of them)")  # fmt: skip
@output_option
def list_services(phase: str | None, labels: tuple[str, ...]) -> None:
    """Every service, one line each."""
    found = _client().get("services", phase=phase, label=list(labels) or None)
    emit(found, SERVICE_COLUMNS)


@services.command("describe")
@click.argument("name")
@output_option
def describe(name: str) -> None:
    """A service, its instances and its latest events."""
    client = _client()
    service = client.get(f"services/{name}")
    instances = client.get(f"services/{name}/instances")
    events = client.get(f"services/{name}/events", limit=10)
    if as_json():
        emit({**service, "instance_list": instances, "events": events})
        return
    click.echo(fields(service, skip=("spec",)))
    click.echo("\ninstances:")
    emit(
        instances,
        [
            ("NAME", "name"),
            ("ROLE", "role"),
            ("STATE", "state"),
            ("NODE", "node"),
            ("CARDS", "devices"),
            ("RESTARTS", "restarts"),
            ("MESSAGE", "message"),
        ],
    )
    click.echo("\nevents:")
    emit(events, [("TIME", "created_at"), ("REASON", "reason"), ("INSTANCE", "instance"),
                  ("MESSAGE", "message")])  # fmt: skip


@services.command("update")
@click.argument("name")
@spec_option
@wait_options
@output_option
def update(name: str, spec_file: str, wait: bool, timeout: float) -> None:
    """Replace a service's spec: a new version, rolled out instance by instance."""
    client = _client()
    service = client.call("PUT", f"services/{name}", json=read_spec(spec_file))
    _warn(service)
    if wait:
        service = _follow(client, name, "running", timeout, True)
    show(service)


@services.command("scale")
@click.argument("name")
@click.option("--instances", type=click.IntRange(0, 1000), required=True, help="how many")
@click.option("--role", type=click.Choice(["prefill", "decode"]), help="for a prefill/decode one")
@wait_options
@output_option
def scale(name: str, instances: int, role: str | None, wait: bool, timeout: float) -> None:
    """Change how many instances a service (or one of its roles) runs."""
    client = _client()
    spec = set_instances(client.get(f"services/{name}")["spec"], instances, role)
    service = client.call("PUT", f"services/{name}", json=spec)
    if wait:
        service = _follow(client, name, "running", timeout, True)
    show(service)


def _state_command(action: str, goal: str, doc: str) -> click.Command:
    @click.argument("name")
    @wait_options
    @output_option
    def command(name: str, wait: bool, timeout: float) -> None:
        client = _client()
        service = client.post(f"services/{name}/{action}")
        if wait:
            service = _follow(client, name, goal, timeout, True)
        show(service)

    command.__doc__ = doc
    return click.command(action)(command)


start = _state_command("start", "running", "Start a stopped service.")
stop = _state_command("stop", "stopped", "Stop a service's instances; its spec is kept.")
services.add_command(start)
services.add_command(stop)


@services.command("delete")
@click.argument("name")
@click.option("--wait", is_flag=True, help="until its last instance has stopped")
@click.option("--timeout", default=600.0, show_default=True, help="seconds --wait waits")
def delete(name: str, wait: bool, timeout: float) -> None:
    """Delete a service: every instance is drained and removed."""
    client = _client()
    client.call("DELETE", f"services/{name}")
    client.config.forget_service_token(name)
    if wait:
        wait_gone(client, name, timeout)
    click.echo(f"service {name} {'deleted' if wait else 'is being deleted'}")
