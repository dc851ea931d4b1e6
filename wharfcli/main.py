"""`wharf`: the entry point. Every command group, and eascmd's verbs as aliases."""

from __future__ import annotations

import click

from wharfcli import canary, mirror, service_ops  # noqa: F401  (their commands join `services`)
from wharfcli.access_keys import access_keys
from wharfcli.adapters import adapters
from wharfcli.batches import batch
from wharfcli.bench import bench
from wharfcli.client import EXIT_CODES
from wharfcli.fleet import keys, nodes, usage
from wharfcli.groups import groups
from wharfcli.output import output_option
from wharfcli.queues import queue
from wharfcli.services import create, delete, describe, list_services, services, start, stop, update
from wharfcli.tools import call, estimate, login, preview
from wharfcli.workspaces import audit, members, workspaces

# eascmd's verbs, for hands used to EAS: `wharf desc NAME` is `wharf services describe NAME`;
# and kubectl's `describe`, for hands used to Kubernetes; `batches` beside `batch`, as OpenAI
# names its API.
VERB_ALIASES = {"create": create, "modify": update, "desc": describe, "describe": describe,
                "list": list_services, "delete": delete, "start": start, "stop": stop,
                "batches": batch}  # fmt: skip


@click.group(epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wharf", prog_name="wharf")
@output_option
def cli() -> None:
    """Deploy and call LLM services on Wharf. Sign in first with `wharf login`; WHARF_API and
    WHARF_TOKEN override what it kept."""


COMMANDS = (login, services, adapters, keys, usage, nodes, preview, estimate, call, bench,
            workspaces, members, audit, access_keys, groups, queue, batch)  # fmt: skip
for command in COMMANDS:
    cli.add_command(command)
for alias, command in VERB_ALIASES.items():
    cli.add_command(command, alias)


def main() -> None:
    cli(prog_name="wharf")
