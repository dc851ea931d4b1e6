"""Answers for people (aligned tables, plain lines) or for scripts (`-o json`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
Column = tuple[str, str | Callable[[dict], Any]]
KEY = "wharf.output"


def _remember(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.find_root().meta[KEY] = value


def output_option(command: F) -> F:
    """`-o table|json` on a command (and on `wharf` itself, for every command under it)."""
    return click.option(
        "-o", "--output", type=click.Choice(["table", "json"]), expose_value=False,
        callback=_remember, is_eager=True, help="table for people (default), json for scripts",
    )(command)  # fmt: skip


def as_json() -> bool:
    return click.get_current_context().find_root().meta.get(KEY) == "json"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return " ".join(f"{k or 'all'}={v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def table(rows: Iterable[dict], columns: Sequence[Column]) -> str:
    cells = [[h for h, _ in columns]]
    for row in rows:
        cells.append([cell(k(row) if callable(k) else row.get(k)) for _, k in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def emit(data: Any, columns: Sequence[Column] | None = None, text: str | None = None) -> None:
    """JSON when asked; else a table of `columns` (data a list), or `text`, or key: value."""
    if as_json():
        click.echo(json.dumps(data, indent=2, default=str))
    elif columns is not None:
        click.echo(table(data, columns))
    elif text is not None:
        click.echo(text)
    elif isinstance(data, dict):
        click.echo(fields(data))
    else:
        click.echo(cell(data))


def fields(data: dict, skip: Sequence[str] = ()) -> str:
    width = max((len(k) for k in data if k not in skip), default=0)
    return "\n".join(f"{k + ':':<{width + 1}} {cell(v)}" for k, v in data.items() if k not in skip)
