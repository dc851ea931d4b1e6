"""`wharf adapters list|add|remove`: a service's LoRA adapters, changed without restarts where
its engine loads them while it runs."""

from __future__ import annotations

import click

from wharfcli.client import Client
from wharfcli.config import Config
from wharfcli.output import emit, output_option


def where(adapter: dict) -> str:
    """instance=state for each instance, with why where it failed."""
    return (
        " ".join(
            f"{i['instance']}={i['state']}" + (f" ({i['message']})" if i["message"] else "")
            for i in adapter["instances"]
        )
        or "-"
    )


@click.group()
def adapters() -> None:
    """LoRA adapters of a service: callers name them '<model>:<adapter>'."""


@adapters.command("list")
@click.argument("service")
@output_option
def list_adapters(service: str) -> None:
    """The service's adapters and where each is loaded."""
    answer = Client(Config.load()).get(f"services/{service}/adapters")
    emit(answer["adapters"], [("NAME", "name"), ("MODEL", "model"), ("INSTANCES", where)])


@adapters.command("add")
@click.argument("service")
@click.argument("name")
@click.argument("model")
@output_option
def add_adapter(service: str, name: str, model: str) -> None:
    """Add adapter NAME from MODEL (a model-store name, an oss://, obs:// or s3:// URI, or a
    path a mount provides): a new version of the service."""
    answer = Client(Config.load()).post(f"services/{service}/adapters",
                                        {"name": name, "model": model})  # fmt: skip
    emit(answer, text=f"adapter {name} added to {service}; see `wharf adapters list {service}`")


@adapters.command("remove")
@click.argument("service")
@click.argument("name")
def remove_adapter(service: str, name: str) -> None:
    """Remove adapter NAME: callers get model_not_found at once, engines unload it."""
    Client(Config.load()).call("DELETE", f"services/{service}/adapters/{name}")
    click.echo(f"adapter {name} removed from {service}")
