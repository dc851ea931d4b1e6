"""Options that take several values after one flag, as ModelArts' scripts take them
(argparse nargs='+'): `--parallel-num 1 4 8`. Click reads one value per flag, so the command
spreads `--flag 1 4 8` into `--flag 1 --flag 4 --flag 8` before it parses its arguments; the
options themselves are declared multiple=True. Only numbers are taken as further values, so
the service's name may follow the list."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import click

NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def spread(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    """`args` with every number after a variadic flag given its own copy of the flag."""
    out: list[str] = []
    position = 0
    while position < len(args):
        arg = args[position]
        out.append(arg)
        position += 1
        if arg == "--":
            out.extend(args[position:])
            break
        if arg not in flags or position == len(args):
            continue
        out.append(args[position])  # the first value, whatever it is: click checks it
        position += 1
        while position < len(args) and NUMBER.fullmatch(args[position]):
            out += [arg, args[position]]
            position += 1
    return out


class VariadicCommand(click.Command):
    def __init__(self, *args: Any, variadic: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.variadic = tuple(variadic)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread(args, self.variadic))
