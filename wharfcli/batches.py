"""`wharf batch`: OpenAI's Batch API on the gateway (gateway.queues.batches), with an API key.

    wharf batch create FILE [--endpoint /v1/chat/completions]   upload FILE (JSON lines), run it
    wharf batch list                                             the workspace's batches
    wharf batch show ID                                          status and request counts
    wharf batch cancel ID                                        drop what waits, then cancelled
    wharf batch output ID [--errors]                             its output (or error) file

The gateway is --gateway (WHARF_GATEWAY_URL, else the API's public gateway address) and the key
--key (WHARF_API_KEY): files and batches are that key's workspace's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import httpx

from wharfcli.client import UNREACHABLE, USAGE, CliError, describe_refusal, exit_code_for
from wharfcli.output import Column, as_json, emit, fields, output_option

TIMEOUT_S = 300.0
ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
COLUMNS: list[Column] = [
    ("ID", "id"), ("STATUS", "status"), ("ENDPOINT", "endpoint"),
    ("DONE", lambda b: f"{b['request_counts']['completed']}/{b['request_counts']['total']}"),
    ("FAILED", lambda b: b["request_counts"]["failed"]),
]  # fmt: skip


def _gateway_options(command):  # noqa: ANN001, ANN201 (click's decorators)
    command = click.option("--gateway", envvar="WHARF_GATEWAY_URL", required=True,
                           help="the gateway's address (WHARF_GATEWAY_URL)")(command)  # fmt: skip
    return click.option("--key", envvar="WHARF_API_KEY", required=True,
                        help="an API key of the workspace (WHARF_API_KEY)")(command)  # fmt: skip


def _call(method: str, gateway: str, key: str, path: str, **kwargs: Any) -> httpx.Response:
    url = gateway.rstrip("/") + "/v1/" + path
    try:
        answer = httpx.request(method, url, timeout=TIMEOUT_S,
                               headers={"Authorization": f"Bearer {key}"}, **kwargs)  # fmt: skip
    except httpx.TransportError as exc:
        raise CliError(f"cannot reach the gateway at {url}: {exc}", UNREACHABLE) from None
    if answer.status_code >= 400:
        raise CliError(f"the gateway answered {answer.status_code}: {describe_refusal(answer)}",
                       exit_code_for(answer.status_code))  # fmt: skip
    return answer


def _shown(batch: dict[str, Any]) -> None:
    counts = batch["request_counts"]
    flat = {"id": batch["id"], "status": batch["status"], "endpoint": batch["endpoint"],
            "requests": counts["total"], "completed": counts["completed"],
            "failed": counts["failed"], "output file": batch["output_file_id"] or "",
            "error file": batch["error_file_id"] or ""}  # fmt: skip
    emit(batch, text=None if as_json() else fields(flat))


@click.group("batch")
def batch() -> None:
    """OpenAI batches: run a file of requests in the capacity online calls leave."""


@batch.command("create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--endpoint", default=ENDPOINTS[0], show_default=True, type=click.Choice(ENDPOINTS))
@_gateway_options
@output_option
def create(file: Path, endpoint: str, gateway: str, key: str) -> None:
    """Upload FILE (one request per line, OpenAI's batch input) and start a batch of it."""
    uploaded = _call("POST", gateway, key, "files", data={"purpose": "batch"},
                     files={"file": (file.name, file.read_bytes())}).json()  # fmt: skip
    asked = {"input_file_id": uploaded["id"], "endpoint": endpoint, "completion_window": "24h"}
    made = _call("POST", gateway, key, "batches", json=asked)
    _shown(made.json())


@batch.command("list")
@_gateway_options
@output_option
def list_batches(gateway: str, key: str) -> None:
    """The workspace's batches, the newest first."""
    emit(_call("GET", gateway, key, "batches", params={"limit": 100}).json()["data"], COLUMNS)


@batch.command("show")
@click.argument("batch_id")
@_gateway_options
@output_option
def show(batch_id: str, gateway: str, key: str) -> None:
    """A batch's status and request counts."""
    _shown(_call("GET", gateway, key, f"batches/{batch_id}").json())


@batch.command("cancel")
@click.argument("batch_id")
@_gateway_options
@output_option
def cancel(batch_id: str, gateway: str, key: str) -> None:
    """Drop its waiting requests; those in work finish, then it is cancelled."""
    _shown(_call("POST", gateway, key, f"batches/{batch_id}/cancel").json())


@batch.command("output")
@click.argument("batch_id")
@click.option("--errors", is_flag=True, help="the error file instead")
@_gateway_options
def output(batch_id: str, errors: bool, gateway: str, key: str) -> None:
    """Print its output file (or error file): one JSON line per request."""
    found = _call("GET", gateway, key, f"batches/{batch_id}").json()
    file_id = found["error_file_id" if errors else "output_file_id"]
    if not file_id:
        raise CliError(f"{batch_id} ({found['status']}) has no {'error' if errors else 'output'} "
                       "file yet", USAGE)  # fmt: skip
    click.echo(_call("GET", gateway, key, f"files/{file_id}/content").text, nl=False)
