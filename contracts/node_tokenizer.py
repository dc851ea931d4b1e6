"""A service's tokenizer files, read where its model is: on the node of one of its instances,
as an instance's log is (contracts.node_logs). The API pushes a request naming the instance
onto the node's list in Redis and waits on a reply key of its own; that node's worker answers
from the folder the instance's engine reads (workers.nodes.node_tokenizer), or says why it cannot.

Only a tokenizer's own small text files are ever read (TOKENIZER_FILES, each under its cap),
never weights or any other file, and only files that stay inside the model's folder with
every link followed. No Django here: the caller hands its Redis client."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

REQUESTS = "wharf:tokenizer:{node}"
REQUEST_TTL = 60  # seconds a request nobody took stays queued
REPLY_TTL = 30  # seconds an answer nobody collected stays in Redis

TOKENIZER = "tokenizer.json"  # the one `wharf bench` needs (a fast tokenizer, `tokenizers`)
TOKENIZER_FILES = (
    TOKENIZER,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
)
MIB = 1024 * 1024
# The largest tokenizer.json files on the hubs are ~35 MB (a 256k-token vocabulary); the
# others are a few MB at most.
MAX_BYTES = {TOKENIZER: 64 * MIB}
MAX_OTHER_BYTES = 16 * MIB


class TokenizerFilesError(Exception):
    """The model's folder has no tokenizer to give (a missing or oversized file): said in
    words the user can act on, never with a path of the node's."""


def _inside(root: Path, path: Path) -> Path | None:
    """`path` with every link followed, when it is a file inside `root`; else None."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()) or not resolved.is_file():
        return None
    return resolved


def _read(root: Path, folder: Path, name: str) -> str | None:
    path = _inside(root, folder / name)
    if path is None:
        return None
    cap = MAX_BYTES.get(name, MAX_OTHER_BYTES)
    if path.stat().st_size > cap:
        raise TokenizerFilesError(f"its {name} is larger than {cap // MIB} MiB")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerFilesError(f"its {name} cannot be read ({type(exc).__name__})") from None


def read_tokenizer(folder: Path, root: Path) -> dict[str, str]:
    """{file name: text} of the tokenizer files in `folder` (tokenizer.json at least), each
    inside `root` once links are followed. TokenizerFilesError saying what is wrong."""
    files = {}
    for name in TOKENIZER_FILES:
        if (text := _read(root, folder, name)) is not None:
            files[name] = text
    if TOKENIZER not in files:
        raise TokenizerFilesError(f"its folder has no {TOKENIZER}")
    return files


def answer(files: dict[str, str] | None = None, error: str | None = None) -> str:
    """A node's reply: the files, or the reason there are none."""
    return json.dumps({"files": files} if error is None else {"error": error})


def fetch(redis: Any, node: str, instance: str, timeout: float = 10.0) -> dict | None:
    """`instance`'s tokenizer as `node` answers it, {"files": {...}} or {"error": "..."};
    None if the node does not answer within `timeout` seconds."""
    reply = f"wharf:tokenizer:reply:{secrets.token_hex(8)}"
    key = REQUESTS.format(node=node)
    with redis.pipeline() as pipe:
        pipe.rpush(key, json.dumps({"instance": instance, "reply": reply}))
        pipe.expire(key, REQUEST_TTL)
        pipe.execute()
    found = redis.blpop([reply], timeout=timeout)
    if found is None:
        return None
    try:
        parsed = json.loads(found[1])
    except ValueError:
        return {"error": "its node's answer was not readable"}
    return parsed if isinstance(parsed, dict) else {"error": "its node's answer was not readable"}
