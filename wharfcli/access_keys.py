"""`wharf access-keys`: access key pairs for EAS's own SDKs, eascmd-style tools and Terraform,
which sign their calls to Wharf's EAS API (/api/v2/) with them."""

from __future__ import annotations

import click

from wharfcli.client import Client
from wharfcli.config import Config
from wharfcli.output import Column, emit, output_option

COLUMNS: list[Column] = [("ACCESSKEYID", "key_id"), ("NAME", "name"), ("CREATED", "created_at"),
           ("LAST USED", "last_used_at"), ("REVOKED", "revoked_at")]  # fmt: skip


@click.group("access-keys")
def access_keys() -> None:
    """Access key pairs (AccessKeyId + AccessKeySecret) acting as you in this workspace."""


@access_keys.command("create")
@click.option("--name", default="eas", show_default=True, help="what the pair is for")
@output_option
def create_access_key(name: str) -> None:
    """Make a pair; the secret is shown once."""
    answer = Client(Config.load()).post("access-keys", {"name": name})
    emit(answer, text=f"AccessKeyId: {answer['key_id']}\nAccessKeySecret: {answer['secret']}"
                      "  (shown once)")  # fmt: skip


@access_keys.command("list")
@output_option
def list_access_keys() -> None:
    """Your pairs in this workspace (secrets are never shown again)."""
    emit(Client(Config.load()).get("access-keys"), COLUMNS)


@access_keys.command("revoke")
@click.argument("key_id")
def revoke_access_key(key_id: str) -> None:
    """Revoke a pair by its AccessKeyId: calls signed with it are refused from now on."""
    Client(Config.load()).call("DELETE", f"access-keys/{key_id}")
    click.echo(f"access key {key_id} revoked")
