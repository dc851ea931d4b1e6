"""`wharf queue`: an Async service's queues (contracts.spec_queue).

    wharf queue show NAME                          items waiting, in work, given back; answers
    wharf queue put NAME [DATA] [--tag k=v] ...     an item into its input queue (DATA, or stdin)
    wharf queue get NAME REQUEST_ID [--wait S]      its answer from the sink (kept unless --take)

`show` asks the API; `put` and `get` call the gateway with the service's token (the one kept
by `wharf services create`, or --token), as EAS's queue API does (gateway.queues)."""

from __future__ import annotations

import base64
import sys

import click
import httpx

from wharfcli.client import UNREACHABLE, USAGE, Client, CliError, describe_refusal, exit_code_for
from wharfcli.config import Config
from wharfcli.output import as_json, emit, fields, output_option

TIMEOUT_S = 30.0


@click.group("queue")
def queue() -> None:
    """An Async service's queues: figures, put an item, get its answer."""


@queue.command("show")
@click.argument("name")
@output_option
def show(name: str) -> None:
    """Items waiting, in work and given back; answers waiting in the sink."""
    figures = Client(Config.load()).get(f"services/{name}/queue")
    flat = {"window": figures["window"], "max delivery": figures["max_delivery"],
            **{f"input {k}": v for k, v in figures["input"].items()},
            **{f"sink {k}": v for k, v in figures["sink"].items()}}  # fmt: skip
    emit(figures, text=None if as_json() else fields(flat))


def _endpoint(name: str, token: str | None) -> tuple[str, dict[str, str]]:
    client = Client(Config.load())
    endpoints = client.get(f"services/{name}")["endpoints"]
    if "sink" not in endpoints:
        raise CliError(f"{name} is not an Async service: call it with `wharf call`", USAGE)
    token = token or client.config.service_token(name)
    if not token:
        raise CliError(f"no token kept for {name}: pass --token", USAGE)
    return endpoints["eas"], {"Authorization": token}


def _send(method: str, url: str, **kwargs) -> httpx.Response:  # noqa: ANN003
    try:
        answer = httpx.request(method, url, timeout=TIMEOUT_S + 10, **kwargs)
    except httpx.TransportError as exc:
        raise CliError(f"cannot reach the gateway at {url}: {exc}", UNREACHABLE) from None
    if answer.status_code >= 400:
        raise CliError(f"the gateway answered {answer.status_code}: {describe_refusal(answer)}",
                       exit_code_for(answer.status_code))  # fmt: skip
    return answer


@queue.command("put")
@click.argument("name")
@click.argument("data", required=False)
@click.option(
    "--path", default="", help="the path its instance is called on (e.g. /v1/completions)"
)
@click.option("--tag", "tags", multiple=True, help="k=v, kept with the item and its answer")
@click.option("--priority", is_flag=True, help="before every item without it")
@click.option("--content-type", default="application/json", show_default=True)
@click.option("--token", help="the service token or an API key (default: the one kept)")
@output_option
def put(name, data, path, tags, priority, content_type, token) -> None:  # noqa: ANN001
    """Put DATA (or stdin) into NAME's input queue; print its index and request id."""
    url, headers = _endpoint(name, token)
    params = {}
    for tag in tags:
        key, sep, value = tag.partition("=")
        if not sep or not key:
            raise CliError(f"--tag {tag!r}: give it as key=value", USAGE)
        params[key] = value
    if priority:
        params["_priority_"] = "1"
    body = (data if data is not None else sys.stdin.read()).encode()
    answer = _send("POST", url + ("/" + path.lstrip("/") if path.strip("/") else ""),
                   content=body, params=params,
                   headers={**headers, "content-type": content_type})  # fmt: skip
    put_item = {"index": int(answer.text), "request_id":
                answer.headers.get("x-eas-queueservice-request-id", "")}  # fmt: skip
    emit(put_item, text=None if as_json() else fields(put_item))


@queue.command("get")
@click.argument("name")
@click.argument("request_id")
@click.option("--wait", type=click.FloatRange(0, 60), default=0, help="seconds to wait for it")
@click.option("--take", is_flag=True, help="delete it from the sink once read")
@click.option("--token", help="the service token or an API key (default: the one kept)")
@output_option
def get(name, request_id, wait, take, token) -> None:  # noqa: ANN001
    """The answer to REQUEST_ID from NAME's sink (exit 4 while there is none)."""
    url, headers = _endpoint(name, token)
    answer = _send("GET", url + "/sink", headers=headers, params={
        "requestId": request_id, "_raw_": "false", "_timeout_": f"{wait:g}s",
        "_auto_delete_": str(take).lower()})  # fmt: skip
    if answer.status_code == 204:
        raise CliError(f"no answer for {request_id} yet", exit_code_for(404))
    (item,) = answer.json()[:1]
    data = base64.b64decode(item["data"]).decode(errors="replace")
    shown = {"index": item["index"], "status": item["tags"].get("lastCode", ""),
             "tags": item["tags"], "data": data}  # fmt: skip
    if as_json():
        emit(shown)
    else:
        click.echo(fields({k: v for k, v in shown.items() if k != "data"}))
        click.echo(data)
