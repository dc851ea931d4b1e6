"""`wharf bench`: ModelArts' static and dynamic benchmarks against a deployed service."""

from __future__ import annotations

import click


@click.group()
def bench() -> None:
    """Benchmark a deployed service through the gateway (static, dynamic, dataset)."""
