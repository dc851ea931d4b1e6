"""`wharf login|preview|estimate|call`."""

from __future__ import annotations

import json
import shlex

import click
import httpx

from wharfcli.client import (
    UNREACHABLE,
    USAGE,
    Client,
    CliError,
    describe_refusal,
    exit_code_for,
)
from wharfcli.config import Config
from wharfcli.output import as_json, emit, fields, output_option
from wharfcli.specs import read_spec, spec_option

CALL_TIMEOUT_S = 600.0


@click.command()
@click.option("--api", required=True, help="the Wharf API's URL, e.g. http://wharf:8000")
@click.option("--token", required=True, help="an API token (manage.py create_api_token USER)")
def login(api: str, token: str) -> None:
    """Keep the API's address and your token (in a file only you can read)."""
    config = Config.load()
    config.api, config.token = api.rstrip("/"), token
    who = Client(config).get("services")  # proves the token before keeping it
    path = config.save()
    click.echo(f"signed in to {config.api} ({len(who)} services visible); kept in {path}")


@click.command()
@spec_option
@output_option
def preview(spec_file: str) -> None:
    """The containers a spec would create, without creating them."""
    answer = Client(Config.load()).post("services/preview", read_spec(spec_file))
    if as_json():
        emit(answer)
        return
    click.echo(f"{answer['name']}: {answer['instances']} instance(s)")
    for container in answer["containers"]:
        role = container["role"] or "instance"
        click.echo(f"\n{role} x{container['instances']}: {container['image']}")
        click.echo("  command: " + shlex.join(container["command"]))
        for member in container.get("members", []):  # an instance across hosts
            click.echo(f"  member {member['rank']}: " + shlex.join(member["command"]))
            for path, content in sorted(member.get("files", {}).items()):  # its rank tables
                click.echo(f"  member {member['rank']} file {path}: " + " ".join(content.split()))
        for key, value in sorted(container["env"].items()):
            click.echo(f"  env {key}={value}")
        for mount in container["mounts"]:
            click.echo(f"  mount {mount}")


@click.command()
@click.option("--model", help="a model in the node's model store")
@click.option("--config", "config_file", type=click.File(), help="or the model's config.json")
@click.option("--card-memory-gb", type=float, required=True, help="memory of one card")
@click.option("--cards", type=click.IntRange(1), help="cards (default: as few as fit)")
@click.option("--dtype", help="weights' dtype (default auto)")
@click.option("--kv-cache-dtype", help="KV cache's dtype (default auto)")
@click.option("--max-model-len", type=click.IntRange(1), help="context length wanted")
@click.option("--gpu-memory-utilization", type=float, help="share of a card to use (0.9)")
@output_option
def estimate(model, config_file, card_memory_gb, cards, dtype, kv_cache_dtype, max_model_len,
             gpu_memory_utilization) -> None:  # fmt: skip
    """Will a model fit: cards, context length, KV cache and concurrent sequences."""
    if (model is None) == (config_file is None):
        raise CliError("give --model or --config (one of them)", USAGE)
    body = {"card_memory_gb": card_memory_gb, "cards": cards, "dtype": dtype,
            "kv_cache_dtype": kv_cache_dtype, "max_model_len": max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization}  # fmt: skip
    if model is not None:
        body["model"] = model
    else:
        try:
            body["config"] = json.load(config_file)
        except ValueError as exc:
            raise CliError(f"--config is not valid JSON: {exc}", USAGE) from None
    body = {k: v for k, v in body.items() if v is not None}
    answer = Client(Config.load()).post("estimate", body)
    emit(answer, text=fields(answer))


@click.command()
@click.argument("name")
@click.option("--prompt", required=True)
@click.option("--max-tokens", default=64, show_default=True, type=click.IntRange(1))
@click.option("--stream", is_flag=True, help="print tokens as they come")
@click.option("--chat", is_flag=True, help="a chat completion (the prompt as a user message)")
@click.option("--token", help="the service token or an API key (default: the one kept)")
@output_option
def call(name, prompt, max_tokens, stream, chat, token) -> None:
    """Call a service through the gateway, as an OpenAI client would."""
    client = Client(Config.load())
    endpoints = client.get(f"services/{name}")["endpoints"]
    token = token or client.config.service_token(name)
    if not token:
        raise CliError(f"no token kept for {name}: pass --token, or `wharf services token "
                       f"rotate {name}` to get a new one", USAGE)  # fmt: skip
    path, body = "completions", {"model": endpoints["model"], "max_tokens": max_tokens}
    if chat:
        path, body["messages"] = "chat/completions", [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body["stream"] = stream
    url = f"{endpoints['openai']}/{path}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(timeout=CALL_TIMEOUT_S) as http:
            if stream:
                _stream(http, url, headers, body, chat)
            else:
                _once(http, url, headers, body, chat)
    except httpx.TransportError as exc:
        raise CliError(f"cannot reach the gateway at {url}: {exc}", UNREACHABLE) from None


def _refused(response: httpx.Response) -> CliError:
    code = exit_code_for(response.status_code)
    return CliError(f"the gateway answered {response.status_code}: "
                    f"{describe_refusal(response)}", code)  # fmt: skip


def _text(choice: dict, chat: bool) -> str:
    if chat:
        return (choice.get("message") or choice.get("delta") or {}).get("content") or ""
    return choice.get("text") or ""


def _once(http: httpx.Client, url: str, headers: dict, body: dict, chat: bool) -> None:
    response = http.post(url, headers=headers, json=body)
    if not response.is_success:
        raise _refused(response)
    answer = response.json()
    emit(answer, text=_text(answer["choices"][0], chat))


def _stream(http: httpx.Client, url: str, headers: dict, body: dict, chat: bool) -> None:
    with http.stream("POST", url, headers=headers, json=body) as response:
        if not response.is_success:
            response.read()
            raise _refused(response)
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if as_json():
                click.echo(json.dumps(chunk))
            elif chunk.get("choices"):
                click.echo(_text(chunk["choices"][0], chat), nl=False)
    if not as_json():
        click.echo()
