"""What a static or dynamic run shares: the service it measures (its gateway URL, model name,
token and tokenizer, checked against the engine), and what happens to its results at the end:
a CSV, the run stored by the API, a summary, and an exit code that says whether every request
succeeded."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from wharfcli.bench.prompts import PromptTokenizer
from wharfcli.bench.results import point_report, write_csv
from wharfcli.bench.runner import Target, TokenCountError, check_token_counts
from wharfcli.bench.stats import Figures, RequestResult
from wharfcli.bench.tokenizer_source import load_tokenizer
from wharfcli.client import FAILED, USAGE, Client, CliError
from wharfcli.config import Config
from wharfcli.output import as_json


def say(line: str) -> None:
    """Progress, on stderr: stdout is the results'."""
    click.echo(line, err=True)


@dataclass
class Session:
    client: Client
    name: str
    target: Target
    tokenizer: PromptTokenizer
    rng: random.Random
    failures: int = 0
    requests: int = 0
    first_error: str = ""

    def record(self, kind: str, row: Figures, results: Sequence[RequestResult]) -> None:
        """One point measured: shown, and its failures counted."""
        self.requests += len(results)
        failed = [r for r in results if not r.ok]
        self.failures += len(failed)
        if failed and not self.first_error:
            self.first_error = failed[0].error
        if not as_json():
            click.echo(point_report(kind, row))
            if failed:
                click.echo(f"  first failure: {failed[0].error}")
            click.echo()


def open_session(name: str, token: str | None, tokenizer_dir: str | None, timeout: float,
                 seed: int) -> Session:  # fmt: skip
    """The service's gateway endpoint and tokenizer, checked with one request."""
    client = Client(Config.load())
    service = client.get(f"services/{name}")
    token = token or client.config.service_token(name)
    if not token:
        raise CliError(f"no token kept for {name}: pass --token, or `wharf services token "
                       f"rotate {name}` to get a new one", USAGE)  # fmt: skip
    endpoints = service["endpoints"]
    target = Target(f"{endpoints['openai']}/completions", endpoints["model"], token, timeout)
    tokenizer = load_tokenizer(client, service, tokenizer_dir)
    rng = random.Random(seed)
    try:
        tokenizer, note = check_token_counts(target, tokenizer, rng)
    except TokenCountError as exc:
        raise CliError(f"{name}: {exc}") from None
    say(f"{name} ({endpoints['model']}) at {target.url}: {note}")
    return Session(client, name, target, tokenizer, rng)


def _store(session: Session, kind: str, parameters: dict[str, Any], rows: list[Figures]) -> dict:
    run = session.client.post(f"services/{session.name}/benchmarks",
                              {"kind": kind, "parameters": parameters, "rows": rows})  # fmt: skip
    api = session.client.api
    say(f"stored as benchmark run {run['id']}: {api}/api/v1/services/{session.name}/benchmarks "
        f"(charted at {api}/services/{session.name}/#monitoring)")  # fmt: skip
    return run


def finish(session: Session, kind: str, parameters: dict[str, Any], rows: list[Figures],
           csv_path: str | None, store: bool) -> None:  # fmt: skip
    """The CSV, the stored run, the JSON answer; exit 1 when any request failed."""
    if csv_path:
        write_csv(Path(csv_path), kind, rows)
        say(f"wrote {len(rows)} rows to {csv_path}")
    run = _store(session, kind, parameters, rows) if store else None
    if as_json():
        click.echo(json.dumps({"kind": kind, "parameters": parameters, "rows": rows,
                               "stored": run and {"id": run["id"]}}, indent=2))  # fmt: skip
    if session.failures:
        raise CliError(f"{session.failures} of {session.requests} requests failed; the first: "
                       f"{session.first_error}", FAILED)  # fmt: skip
