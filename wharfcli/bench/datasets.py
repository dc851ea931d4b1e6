"""Datasets for the dynamic benchmark: made like ModelArts' generate_dataset.py, or read from
ShareGPT, Alpaca or a file of our own (custom) format.

- custom (what `wharf bench dataset` writes): a JSON list of
  {"prompt": str, "prompt_tokens": int, "output_tokens": int}; prompt_tokens is informational
  (the prompt is counted again with the service's tokenizer before it is sent);
- sharegpt: [{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}]:
  the first turn is the prompt, the second's length (in tokens) the output asked;
- alpaca: [{"instruction": ..., "input": ..., "output": ...}]: instruction and input are the
  prompt, output's length the output asked.

A file is a JSON list, or JSON Lines (one object per line). Reading keeps the texts; only the
entries a run samples are tokenized, so a 90,000-conversation ShareGPT file is quick to use.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wharfcli.bench.prompts import BenchRequest, PromptTokenizer

KINDS = ("sharegpt", "alpaca", "custom")


class DatasetError(ValueError):
    """The file is not a dataset of the kind named; the message says where and why."""


@dataclass(frozen=True)
class Entry:
    """A prompt and the output asked for it: a number of tokens, or a reference text whose
    token count it is."""

    prompt: str
    output_tokens: int | None = None
    output_text: str | None = None


@dataclass(frozen=True)
class Lengths:
    """generate_dataset.py's options for one side (input or output): a normal distribution
    of mean `avg` and standard deviation `std`, clipped to [low, high]."""

    low: int
    high: int
    avg: float
    std: float

    def problems(self, side: str) -> list[str]:
        found = []
        if self.low < 1:
            found.append(f"--min-{side} must be at least 1")
        if self.high < self.low:
            found.append(f"--max-{side} must be at least --min-{side}")
        if not math.isfinite(self.avg):
            found.append(f"--avg-{side} must be a number")
        if not (math.isfinite(self.std) and self.std >= 0):
            found.append(f"--std-{side} must be a number of 0 or more")
        return found

    def draw(self, count: int, rng: random.Random) -> list[int]:
        return [min(self.high, max(self.low, round(rng.gauss(self.avg, self.std))))
                for _ in range(count)]  # fmt: skip


def generate(
    tokenizer: PromptTokenizer, inputs: Lengths, outputs: Lengths, count: int, rng: random.Random
) -> list[dict[str, Any]]:
    """`count` custom entries: prompts of exactly the drawn input lengths, and output
    lengths drawn from theirs."""
    prompt_lengths = inputs.draw(count, rng)
    output_lengths = outputs.draw(count, rng)
    return [
        {"prompt": tokenizer.exact_prompt(tokens, rng), "prompt_tokens": tokens,
         "output_tokens": output}
        for tokens, output in zip(prompt_lengths, output_lengths, strict=True)
    ]  # fmt: skip


def _records(path: Path) -> list[Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list):
        return data
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError as exc:
                raise DatasetError(f"{path} is neither a JSON list nor JSON Lines "
                                   f"(line {number}: {exc})") from None  # fmt: skip
    return records


def _text(record: dict, key: str) -> str:
    value = record.get(key)
    return value if isinstance(value, str) else ""


def _sharegpt(record: Any) -> Entry | None:
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    if not all(isinstance(turn, dict) for turn in turns[:2]):
        return None
    prompt, reply = _text(turns[0], "value"), _text(turns[1], "value")
    return Entry(prompt, output_text=reply) if prompt and reply else None


def _alpaca(record: Any) -> Entry | None:
    if not isinstance(record, dict):
        return None
    instruction, extra = _text(record, "instruction"), _text(record, "input")
    prompt = f"{instruction}\n\n{extra}" if extra else instruction
    reply = _text(record, "output")
    return Entry(prompt, output_text=reply) if prompt and reply else None


def _custom(record: Any, index: int) -> Entry:
    where = f"entry {index}"
    if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
        raise DatasetError(f"{where}: a custom entry is {{\"prompt\": text, "
                           "\"output_tokens\": N}")  # fmt: skip
    output = record.get("output_tokens")
    if isinstance(output, bool) or not isinstance(output, int) or output < 1:
        raise DatasetError(f"{where}: output_tokens must be a whole number of 1 or more")
    return Entry(record["prompt"], output_tokens=output)


def read_entries(path: Path, kind: str) -> list[Entry]:
    """The usable entries of a dataset file (sharegpt and alpaca skip those with no prompt or
    no reply; a bad custom entry is an error naming it)."""
    if kind not in KINDS:
        raise DatasetError(f"unknown dataset type {kind!r}; one of {', '.join(KINDS)}")
    records = _records(path)
    if kind == "custom":
        entries = [_custom(record, index) for index, record in enumerate(records)]
    else:
        read = _sharegpt if kind == "sharegpt" else _alpaca
        entries = [entry for record in records if (entry := read(record)) is not None]
    if not entries:
        raise DatasetError(f"{path} has no usable {kind} entries")
    return entries


def sample(
    entries: list[Entry],
    count: int,
    tokenizer: PromptTokenizer,
    rng: random.Random,
    max_prompt_tokens: int | None = None,
    max_tokens: int | None = None,
) -> list[BenchRequest]:
    """`count` requests drawn from `entries` in a seeded random order, each counted with the
    service's tokenizer; entries past the limits (prompt, or prompt and output together) are
    left out. A dataset with fewer usable entries than `count` is used again from its start."""
    order = list(range(len(entries)))
    rng.shuffle(order)
    usable: list[BenchRequest] = []
    for index in order:
        entry = entries[index]
        prompt_tokens = tokenizer.count(entry.prompt)
        output = entry.output_tokens or tokenizer.text_tokens(entry.output_text or "")
        if output < 1 or (max_prompt_tokens and prompt_tokens > max_prompt_tokens):
            continue
        if max_tokens and prompt_tokens + output > max_tokens:
            continue
        usable.append(BenchRequest(entry.prompt, prompt_tokens, output))
        if len(usable) == count:
            return usable
    if not usable:
        raise DatasetError("no entry of the dataset fits --max-prompt-tokens and --max-tokens")
    return [usable[i % len(usable)] for i in range(count)]
