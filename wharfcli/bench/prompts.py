"""Prompts of exactly N tokens, as the engine counts them, built with the model's own tokenizer.

The count is the engine's: the text's tokens plus the special tokens the engine adds to a
completion prompt (a BOS, for most models). The tokenizer's post-processor says which it
adds; tokenizer_config.json's add_bos_token can change that for transformers' tokenizers, and
`wharf bench` checks the result against the engine's own usage.prompt_tokens before it
measures anything (runner.check_token_counts), so `extra` holds what is left to add.

A prompt is random words (seeded): every request gets a different text, so an engine's prefix
cache cannot answer one request from another's work. The words are cut at the N-th token's end
and then trimmed or padded, re-counting each time, until the count is exact: a byte-pair
tokenizer may merge across a cut, so one cut alone does not guarantee it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
MAX_FIXES = 64
_TEXT = (
    "the of and to in is was that for on with as by at from his her they this which or had "
    "not are but were one all an their has been there who would more when will its into time "
    "only some could them other than then may over new these two most first any like made "
    "after also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three "
    "river engine token serve model light north market garden signal window paper music"
)
WORDS = _TEXT.split()
FILLERS = (" a", " I", ".", ",", " x", " s", "1", " the", "!", "-")


class PromptError(ValueError):
    """No prompt of the asked length can be made with this tokenizer."""


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _config_extra(tokenizer: Tokenizer, config: dict[str, Any]) -> int:
    """Special tokens transformers adds beyond (or takes away from) the post-processor's:
    add_bos_token / add_eos_token, for the tokenizers whose class honours them."""
    extra = 0
    with_special = tokenizer.encode("a", add_special_tokens=True).ids
    for flag, key, at in (("add_bos_token", "bos_token", 0), ("add_eos_token", "eos_token", -1)):
        token = _token_text(config.get(key))
        token_id = tokenizer.token_to_id(token) if token else None
        if token_id is None or not isinstance(config.get(flag), bool):
            continue
        adds = with_special[at] == token_id
        extra += int(config[flag] and not adds) - int(adds and not config[flag])
    return extra


class PromptTokenizer:
    """Token counts as the engine makes them, and prompts of an exact count."""

    def __init__(self, tokenizer: Tokenizer, extra: int = 0) -> None:
        self.tokenizer = tokenizer
        self.extra = extra
        own = len(tokenizer.encode("a", add_special_tokens=True).ids)
        self.special = own - len(tokenizer.encode("a", add_special_tokens=False).ids) + extra

    @classmethod
    def from_dir(cls, folder: Path) -> PromptTokenizer:
        """The tokenizer in a model's folder: tokenizer.json, and tokenizer_config.json when
        there is one."""
        path = Path(folder) / TOKENIZER_FILE
        if not path.is_file():
            raise PromptError(f"{folder} has no {TOKENIZER_FILE} (a fast tokenizer's file); "
                              "give the folder of the model the service runs")  # fmt: skip
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust library raises a bare Exception for a bad file
            raise PromptError(
                f"{path} is not a tokenizer the tokenizers library reads: {exc}"
            ) from None
        config: Any = {}
        if (Path(folder) / CONFIG_FILE).is_file():
            try:
                config = json.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise PromptError(f"{folder / CONFIG_FILE} cannot be read: {exc}") from None
        extra = _config_extra(tokenizer, config) if isinstance(config, dict) else 0
        return cls(tokenizer, extra)

    def adjusted(self, delta: int) -> PromptTokenizer:
        """The same tokenizer, counting `delta` more special tokens per prompt."""
        return PromptTokenizer(self.tokenizer, self.extra + delta)

    def text_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        """The prompt's length as the engine counts it."""
        return self.text_tokens(text) + self.special

    def exact_prompt(self, tokens: int, rng: random.Random) -> str:
        """A prompt the engine counts as exactly `tokens` tokens; PromptError if none can be."""
        body = tokens - self.special
        if body < 1:
            raise PromptError(f"a prompt of {tokens} tokens has no room for text: the engine "
                              f"adds {self.special} special token(s) to every prompt")  # fmt: skip
        words: list[str] = []
        count = 0
        while count < body:
            words.extend(rng.choice(WORDS) for _ in range(max(8, body - count)))
            count = self.text_tokens(" ".join(words))
        text = " ".join(words)
        for _ in range(MAX_FIXES):
            encoding = self.tokenizer.encode(text, add_special_tokens=False)
            if len(encoding.ids) == body:
                return text
            if len(encoding.ids) > body:
                cut = encoding.offsets[body - 1][1]
                text = text[:cut] if 0 < cut < len(text) else text[:-1]
            else:
                text += rng.choice(FILLERS)
        raise PromptError(f"no prompt of exactly {tokens} tokens came out of this tokenizer "
                          f"after {MAX_FIXES} tries")  # fmt: skip


@dataclass(frozen=True)
class BenchRequest:
    """One request to send: the prompt, its length as the engine counts it, and the output
    length asked (max_tokens, with ignore_eos so the engine generates all of it)."""

    prompt: str
    prompt_tokens: int
    output_tokens: int
