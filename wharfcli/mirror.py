"""`wharf services mirror NAME`: where a service's calls are mirrored (EAS's ServiceMirror),
and the figures the gateways measured of both sides; `--to T --ratio N` sets it, `--off`
stops it. The API checks every value and names what is wrong."""

from __future__ import annotations

import click

from wharfcli.client import USAGE, CliError
from wharfcli.output import Column, as_json, emit, fields, output_option, table
from wharfcli.services import _client, services

FIGURE_COLUMNS: list[Column] = [
    ("CALLS", "side"), ("REQUESTS", "requests"), ("ERRORS", "errors"),
    ("TTFT P50", "ttft_p50_ms"), ("TTFT P95", "ttft_p95_ms"),
    ("ITL P50", "itl_p50_ms"), ("ITL P95", "itl_p95_ms"),
]  # fmt: skip


def mirror_text(name: str, state: dict) -> str:
    """The mirror for people: its targets and share, then both sides' figures (ms)."""
    figures = state["figures"]
    head = {"service": name, "targets": ", ".join(state["targets"]) or "none",
            "ratio": f"{state['ratio']}%", "minutes": figures["minutes"]}  # fmt: skip
    rows = [{"side": f"{name} (its own)", **figures.get("service", {})}]
    rows += [{"side": f"{t} (copies)", **f} for t, f in figures.get("targets", {}).items()]
    note = f"\n(figures unavailable: {figures['unavailable']})" if "unavailable" in figures else ""
    return fields(head) + "\n\n" + table(rows, FIGURE_COLUMNS) + note


@services.command("mirror")
@click.argument("name")
@click.option("--to", "targets", multiple=True, help="a service that gets the copies (repeat)")
@click.option("--ratio", type=click.IntRange(1, 100), help="percent of calls copied")
@click.option("--off", is_flag=True, help="stop mirroring")
@click.option("--minutes", type=click.IntRange(1, 60), default=5, show_default=True,
              help="how far back the figures go")  # fmt: skip
@output_option
def mirror(name: str, targets: tuple[str, ...], ratio: int | None, off: bool, minutes: int) -> None:
    """Show, set (--to T --ratio N) or stop (--off) the mirroring of a service's calls."""
    client = _client()
    if off and (targets or ratio):
        raise CliError("--off takes no --to or --ratio", USAGE)
    if bool(targets) != (ratio is not None):
        raise CliError("give --to and --ratio together", USAGE)
    if off:
        client.call("DELETE", f"services/{name}/mirror")
    elif targets:
        client.call("PUT", f"services/{name}/mirror", json={"targets": list(targets),
                                                             "ratio": ratio})  # fmt: skip
    state = client.get(f"services/{name}/mirror", minutes=minutes)
    emit(state, text=None if as_json() else mirror_text(name, state))
