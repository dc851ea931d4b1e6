"""`wharf bench`: ModelArts' static and dynamic benchmarks against a deployed service."""

from __future__ import annotations

import click

from wharfcli.bench.commands import dataset, dynamic, list_runs, static


@click.group()
def bench() -> None:
    """Benchmark a deployed service through the gateway (static, dynamic, dataset), and list
    the runs stored for it."""


for command in (static, dynamic, dataset, list_runs):
    bench.add_command(command)
