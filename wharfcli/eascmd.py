"""`eascmd`: Alibaba PAI-EAS's command line, line for line, against Wharf's REST API.

The verbs and their arguments are eascmd's documented ones; what runs is wharfcli's client
(errors and exit codes), so every failure is a message and a non-zero exit.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from wharfcli.client import NOT_FOUND, TIMED_OUT, USAGE, Client, CliError
from wharfcli.eascmd_config import Profile, default_path
from wharfcli.eascmd_output import (
    LIST_HEADER,
    WORKER_HEADER,
    boxed,
    describe_rows,
    endpoint_rows,
    list_row,
    waiting_line,
    worker_row,
)
from wharfcli.eascmd_spec import apply_settings, merge
from wharfcli.specs import read_spec
from wharfcli.watch import DONE, FAILED, POLL_S, verdict

HELP = """Alibaba PAI-EAS's eascmd, against Wharf.

\b
Wharf has no access-key pairs: -k (AccessKeySecret) is a Wharf API token
(`python manage.py create_api_token`), -i (AccessKeyId) is kept as its name
and sent nowhere, -e is Wharf's API address (http://host:8000 or host:port).
`eascmd config -i NAME -k TOKEN -e HOST:PORT` keeps them in ~/.eas/config
($EASCMD_CONFIG_DIR/config; -c FILE another file); -i/-k/-e before a verb
override it for that command."""
EPILOG = """Exit codes: 0 done; 1 refused or failed (the reason is printed); 2 bad usage or a
verb Wharf does not have; 3 no or a refused token; 4 not found; 5 the API cannot be reached;
6 --timeout passed before the service settled."""
DEFAULT_TIMEOUT = 1800.0
REFUSED_VERBS = {
    "bench": "stress tests: use `wharf bench static|dynamic`",
    "resource": "resource groups: Wharf's nodes are `wharf nodes list`",
    "pysdk": "processor SDK environments: Wharf runs images and LLM engines, not processors",
    "upload": "uploads to EAS-managed OSS: put models in the model store or your own bucket",
    "test": "local processor runs: deploy the spec and call it",
}


class State:
    def __init__(self, path: Path, profile: Profile) -> None:
        self.path, self.profile = path, profile

    def client(self) -> Client:
        hint = f"check the token: `eascmd config -k TOKEN -e {self.profile.endpoint}`"
        return Client(self.profile.client_config(self.path), login_hint=hint)


def timeout_option(command):
    return click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True,
                        help="seconds to follow the service before giving up")(command)  # fmt: skip


def yes_option(command):
    return click.option("-y", "--yes", is_flag=True, help="do not ask [Y/n]")(command)


@click.group(help=HELP, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "config_file", type=click.Path(dir_okay=False), help="config file")
@click.option("-i", "access_id", help="AccessKeyId: the token's name (kept, not sent)")
@click.option("-k", "access_key", help="AccessKeySecret: a Wharf API token")
@click.option("-e", "endpoint", help="Wharf's API address: http://host:8000 or host:port")
@click.pass_context
def cli(ctx, config_file, access_id, access_key, endpoint) -> None:
    path = Path(config_file).expanduser() if config_file else default_path()
    profile = Profile.load(path).overridden(access_id, access_key, endpoint)
    ctx.obj = State(path, profile)


@cli.command("config")
@click.option("-i", "access_id", help="AccessKeyId: a name for the token")
@click.option("-k", "access_key", help="AccessKeySecret: a Wharf API token")
@click.option("-e", "endpoint", help="Wharf's API address: http://host:8000 or host:port")
@click.pass_obj
def config(state: State, access_id, access_key, endpoint) -> None:
    """Keep the access key (a Wharf API token) and the endpoint (Wharf's API address)."""
    profile = state.profile.overridden(access_id, access_key, endpoint)
    profile.save(state.path)
    click.echo(f"[OK] Configuration saved to {state.path}")
    masked = "******" if profile.access_key else "-"
    click.echo(boxed([["AccessKeyId", profile.access_id or "-"], ["AccessKeySecret", masked],
                      ["Endpoint", profile.endpoint or "-"]]))  # fmt: skip


def follow(client: Client, name: str, goal: str, timeout: float) -> dict:
    """Prints `[OK] …` as the service moves until it reaches `goal` (running or stopped);
    CliError (exit 1) if it fails, (exit 6) past the timeout."""
    deadline, last = time.monotonic() + timeout, ""
    while True:
        service = client.get(f"services/{name}")
        line = waiting_line(service)
        if line != last:
            click.echo(line)
            last = line
        outcome = verdict(service, goal)
        if outcome == DONE:
            click.echo(f"[OK] Service is {goal}")
            return service
        if outcome == FAILED:
            reason = service.get("last_error") or service.get("progress") or "it failed"
            raise CliError(f"service {name} failed: {reason}")
        if time.monotonic() > deadline:
            raise CliError(f"gave up after {timeout:.0f} s; {name} is still "
                           f"{service.get('phase')}", TIMED_OUT)  # fmt: skip
        time.sleep(POLL_S)


def _warn(service: dict) -> None:
    for warning in service.get("warnings") or []:
        click.echo(f"[WARNING] {warning['field']}: {warning['message']}", err=True)
    for note in service.get("notes") or []:  # what an instance type filled in
        click.echo(f"[INFO] {note['field']}: {note['message']}", err=True)


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    answer = click.prompt(question, default="Y", show_default=False, prompt_suffix=" ")
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError("cancelled; nothing was changed")


@cli.command("create")
@click.argument("service_desc_json", type=click.Path(allow_dash=True))
@timeout_option
@click.pass_obj
def create(state: State, service_desc_json: str, timeout: float) -> None:
    """Create a service from its JSON file and follow it until it is running."""
    client = state.client()
    service = client.post("services", read_spec(service_desc_json))
    _warn(service)
    click.echo(boxed(endpoint_rows(service)))
    click.echo("[OK] Service is now creating")
    follow(client, service["name"], "running", timeout)


@cli.command("modify", context_settings={"ignore_unknown_options": False})
@click.argument("name")
@click.option("-s", "service_desc_json", type=click.Path(allow_dash=True),
              help="a JSON file of what changes; merged into the service's spec")  # fmt: skip
@click.option("-D", "settings", multiple=True, metavar="KEY=VALUE",
              help="set one dotted path: -Dmetadata.instance=2 (repeatable)")  # fmt: skip
@timeout_option
@click.pass_obj
def modify(state: State, name: str, service_desc_json, settings, timeout: float) -> None:
    """Change a service: merge a file (-s) and/or set paths (-D) in its spec as EAS writes it,
    then follow it until it runs the change. Changing only metadata.instance scales."""
    if not service_desc_json and not settings:
        raise CliError("give -s FILE or -Dkey=value (e.g. -Dmetadata.instance=2)", USAGE)
    change = read_spec(service_desc_json) if service_desc_json else {}
    client = state.client()
    spec = merge(client.get(f"services/{name}", format="eas"), change)
    spec = apply_settings(spec, list(settings))
    service = client.call("PUT", f"services/{name}", json=spec)
    _warn(service)
    click.echo(f"[OK] Service [{name}] is now updating (version {service.get('version')})")
    follow(client, name, "running", timeout)


cli.add_command(modify, "update")  # EasyRec's documents use it for `modify -s`


@cli.command("desc")
@click.argument("name")
@click.pass_obj
def desc(state: State, name: str) -> None:
    """A service: status, instances, resources, versions, endpoints and its spec."""
    client = state.client()
    service = client.get(f"services/{name}")
    eas_spec = client.get(f"services/{name}", format="eas")
    versions = client.get(f"services/{name}/versions")
    click.echo(boxed(describe_rows(service, eas_spec, versions)))


@cli.command("ls")
@click.pass_obj
def ls(state: State) -> None:
    """Every service the token's workspace has."""
    rows = [list_row(s) for s in state.client().get("services")]
    click.echo(boxed(rows, LIST_HEADER))


cli.add_command(ls, "list")


@cli.command("w")
@click.argument("name")
@click.pass_obj
def workers(state: State, name: str) -> None:
    """A service's instances."""
    rows = [worker_row(i) for i in state.client().get(f"services/{name}/instances")]
    click.echo(boxed(rows, WORKER_HEADER))


cli.add_command(workers, "showworkers")


@cli.command("dw")
@click.argument("name")
@click.argument("instances")
@yes_option
@timeout_option
@click.pass_obj
def delete_workers(state: State, name: str, instances: str, yes: bool, timeout: float) -> None:
    """Delete (restart) instances, comma-separated. Wharf's API restarts a whole service
    only (a stop, then a start): name every instance of it."""
    client = state.client()
    service = client.get(f"services/{name}")
    named = [n for n in instances.split(",") if n]
    have = [i["name"] for i in client.get(f"services/{name}/instances")]
    unknown = [n for n in named if n not in have]
    if unknown or not named:
        raise CliError(f"{name} has no instance {', '.join(unknown) or '(none named)'}; it has "
                       f"{', '.join(have) or 'none'}", NOT_FOUND)  # fmt: skip
    if set(named) != set(have):
        raise CliError(
            f"Wharf cannot delete single instances yet: name every instance of {name} "
            f"({','.join(have)}) to restart them all, or run `eascmd stop {name}` and "
            f"`eascmd start {name}`"
        )
    region = service.get("workspace")
    _confirm(f"Are you sure to delete the instances [{instances}] of service [{name}] in "
             f"[{region}]? [Y/n]", yes)  # fmt: skip
    client.post(f"services/{name}/stop")
    follow(client, name, "stopped", timeout)
    client.post(f"services/{name}/start")
    follow(client, name, "running", timeout)
    click.echo(f"[OK] Instance(s) [{instances}] for service [{name}] in region [{region}] was "
               "deleted successfully")  # fmt: skip


cli.add_command(delete_workers, "deleteworkers")


def _state_verb(action: str, goal: str, doc: str) -> click.Command:
    @click.argument("name")
    @timeout_option
    @click.pass_obj
    def command(state: State, name: str, timeout: float) -> None:
        client = state.client()
        client.post(f"services/{name}/{action}")
        click.echo(f"[OK] Service [{name}] is {'starting' if action == 'start' else 'stopping'}")
        follow(client, name, goal, timeout)

    command.__doc__ = doc
    return cli.command(action)(command)


_state_verb("start", "running", "Start a stopped service and follow it until it runs.")
_state_verb("stop", "stopped", "Stop a service (its spec is kept) until no instance runs.")


@cli.command("delete")
@click.argument("name")
@yes_option
@timeout_option
@click.pass_obj
def delete(state: State, name: str, yes: bool, timeout: float) -> None:
    """Delete a service: its instances are drained and removed, then the service."""
    client = state.client()
    region = client.get(f"services/{name}").get("workspace")
    _confirm(f"Are you sure to delete the service [{name}] in [{region}]? [Y/n]", yes)
    client.call("DELETE", f"services/{name}")
    click.echo(f"[OK] Service [{name}] in region [{region}] is terminating")
    deadline = time.monotonic() + timeout
    while True:
        try:  # its events are readable until its last instance has stopped and it is gone
            client.get(f"services/{name}/events", limit=1)
        except CliError as exc:
            if exc.exit_code != NOT_FOUND:
                raise
            click.echo("[OK] Service was deleted successfully")
            return
        if time.monotonic() > deadline:
            raise CliError(f"gave up after {timeout:.0f} s; {name} is still terminating",
                           TIMED_OUT)  # fmt: skip
        time.sleep(POLL_S)


@cli.command("version")
@click.argument("name")
@click.argument("version_id", type=click.IntRange(1))
@timeout_option
@click.pass_obj
def version(state: State, name: str, version_id: int, timeout: float) -> None:
    """Run an earlier version's spec again (it becomes the newest version, as a rollback)."""
    client = state.client()
    service = client.post(f"services/{name}/rollback", {"version": version_id})
    click.echo(f"[OK] Service [{name}] is switching to version {version_id} "
               f"(now version {service.get('version')})")  # fmt: skip
    follow(client, name, "running", timeout)


def _refused_verb(verb: str, why: str) -> None:
    @cli.command(verb, context_settings={"ignore_unknown_options": True}, add_help_option=False,
                 help=f"Not in Wharf: {why}.")  # fmt: skip
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args) -> None:
        raise CliError(f"eascmd {verb} is not available on Wharf ({why})", USAGE)


for _verb, _why in REFUSED_VERBS.items():
    _refused_verb(_verb, _why)


def main() -> None:
    """eascmd's own error lines: `[ERROR] …` on stderr, and the exit code of the failure."""
    try:
        result = cli.main(prog_name="eascmd", standalone_mode=False)
    except click.UsageError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"[ERROR] {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("[ERROR] aborted", err=True)
        sys.exit(1)
    sys.exit(result if isinstance(result, int) else 0)
