"""Spec files as `wharf` reads them: `-f FILE` (JSON, or `-` for standard input)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from wharfcli.client import USAGE, CliError


def spec_option(command):
    return click.option(
        "-f", "--file", "spec_file", required=True, type=click.Path(allow_dash=True),
        help="the service's JSON spec (EAS's standalone format plus `llm`); - reads stdin",
    )(command)  # fmt: skip


def read_spec(path: str) -> dict[str, Any]:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as file:
                text = file.read()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", USAGE) from None
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise CliError(f"{path} is not valid JSON: {exc}", USAGE) from None
    if not isinstance(spec, dict):
        raise CliError(f"{path} must hold a JSON object", USAGE)
    return spec


def set_instances(spec: dict[str, Any], count: int, role: str | None) -> dict[str, Any]:
    """The spec with `count` instances: metadata.instance, or one role's of a prefill/decode
    service (llm.pd.<role>.instance). A role asked of a service without roles is an error."""
    spec = json.loads(json.dumps(spec))  # a copy
    pd = (spec.get("llm") or {}).get("pd")
    if role is None:
        if pd:
            raise CliError("this service has prefill and decode roles: add --role", USAGE)
        spec.setdefault("metadata", {})["instance"] = count
    elif not pd:
        raise CliError("--role applies only to a service with prefill/decode separation", USAGE)
    else:
        pd.setdefault(role, {})["instance"] = count
    return spec
