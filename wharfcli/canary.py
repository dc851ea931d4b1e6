"""`wharf services canary NAME -f new.json`: release a new version as a canary, judged step by
step on errors, time to first token and inter-token latency against the stable one, and
follow it, printing each step and decision as it happens (Ctrl-C stops following, not the
release). Without -f it shows the latest release; --pause, --resume, --promote and --abort
act on the one under way. The API checks every value and names what is wrong."""

from __future__ import annotations

import re
import time

import click

from wharfcli.client import FAILED, USAGE, CliError
from wharfcli.output import as_json, emit, fields
from wharfcli.services import _client, services
from wharfcli.specs import read_spec

POLL_S = 2.0
DONE = {"promoted": 0, "rolled_back": FAILED, "aborted": FAILED}
DURATION = re.compile(r"^(\d+)(s|m|h)?$")
ACTIONS = ("pause", "resume", "promote", "abort")


def seconds(text: str) -> int:
    """`90`, `90s`, `2m`, `1h` as seconds; CliError (bad usage) otherwise."""
    found = DURATION.fullmatch(text.strip())
    if found is None:
        raise CliError(f"--interval {text!r}: a duration such as 60s, 2m or 1h", USAGE)
    return int(found[1]) * {"s": 1, None: 1, "m": 60, "h": 3600}[found[2]]


def steps(text: str) -> list[int]:
    """`10,50,100` as [10, 50, 100]; CliError (bad usage) otherwise (the API checks the rest)."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise CliError(f"--steps {text!r}: percentages separated by commas, e.g. 10,50,100",
                       USAGE) from None  # fmt: skip


def side(figures: dict) -> str:
    if not figures or not figures.get("requests"):
        return "no calls yet"
    return (f"{figures['requests']} calls, {figures.get('errors', 0)} errors, TTFT p50/p95 "
            f"{figures.get('ttft_p50_ms')}/{figures.get('ttft_p95_ms')} ms, ITL p50/p95 "
            f"{figures.get('itl_p50_ms')}/{figures.get('itl_p95_ms')} ms")  # fmt: skip


def release_text(release: dict) -> str:
    marks = [f"[{s}%]" if i == release["step"] and release["weight"] else f"{s}%"
             for i, s in enumerate(release["steps"])]  # fmt: skip
    figures = release.get("figures") or {}
    head = {
        "state": release["state"],
        "steps": " → ".join(marks),
        "weight": f"{release['weight']}% of calls to the canary",
        "judged": f"every {release['interval_s']} s",
        "last": release["message"] or "-",
        "canary": side(figures.get("canary", {})),
        "stable": side(figures.get("stable", {})),
    }
    return fields(head)


def line(release: dict) -> str:
    """One line of the follow: the time, the state, the share, the judgement."""
    stamp = time.strftime("%H:%M:%S")
    return f"{stamp}  {release['state']:<11} {release['weight']:>3}%  {release['message']}"


def follow(client, name: str) -> int:
    """Print each change of state, step or judgement kind until the release ends; its exit
    code (0 promoted, 1 rolled back or aborted)."""
    last: tuple = ()
    try:
        while True:
            release = client.get(f"services/{name}/canary")
            kind = (release["message"] or "").split(":")[0]
            now = (release["state"], release["step"], kind)
            if now != last:
                click.echo(line(release))
                last = now
            if release["state"] in DONE:
                return DONE[release["state"]]
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        click.echo(f"stopped following; the release goes on (wharf services canary {name})")
        return 0


@services.command("canary")
@click.argument("name")
@click.option(
    "-f",
    "--file",
    "spec_file",
    type=click.Path(allow_dash=True),
    help="the new version's JSON spec: release it as a canary",
)
@click.option(
    "--steps",
    "step_list",
    default="10,50,100",
    show_default=True,
    help="the canary's share of the calls at each step, percent, ending at 100",
)
@click.option("--interval", default="60s", show_default=True, help="how long each step is judged")
@click.option("--max-error-rate", type=float, default=0.01, show_default=True)
@click.option(
    "--max-ttft-ratio",
    type=float,
    default=1.5,
    show_default=True,
    help="the canary's TTFT p50/p95 at most this times the stable side's",
)
@click.option(
    "--max-itl-ratio",
    type=float,
    default=1.3,
    show_default=True,
    help="the same for inter-token latency",
)
@click.option(
    "--min-requests",
    type=int,
    default=50,
    show_default=True,
    help="calls the canary serves before a step is judged on latency",
)
@click.option("--no-follow", is_flag=True, help="start it and return")
@click.option("--pause", "action", flag_value="pause", help="hold the release where it is")
@click.option("--resume", "action", flag_value="resume", help="judge it again, afresh")
@click.option("--promote", "action", flag_value="promote", help="promote it now")
@click.option("--abort", "action", flag_value="abort", help="roll it back now")
def canary(name, spec_file, step_list, interval, max_error_rate, max_ttft_ratio, max_itl_ratio,
           min_requests, no_follow, action) -> None:  # fmt: skip
    """Release a new version as a canary (-f), show the latest release, or act on it."""
    client = _client()
    if spec_file and action:
        raise CliError("-f starts a release; --pause/--resume/--promote/--abort act on one",
                       USAGE)  # fmt: skip
    if action:
        release = client.post(f"services/{name}/canary/{action}")
    elif spec_file:
        body = {"spec": read_spec(spec_file), "steps": steps(step_list),
                "interval_s": seconds(interval), "max_error_rate": max_error_rate,
                "max_ttft_ratio": max_ttft_ratio, "max_itl_ratio": max_itl_ratio,
                "min_requests": min_requests}  # fmt: skip
        release = client.post(f"services/{name}/canary", body)
        if not no_follow and not as_json():
            raise SystemExit(follow(client, name))
    else:
        release = client.get(f"services/{name}/canary")
    emit(release, text=None if as_json() else release_text(release))
