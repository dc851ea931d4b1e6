"""The tokenizer `wharf bench` counts with: a folder given with --tokenizer, or the service's
own, fetched once from GET /api/v1/services/<name>/tokenizer (read on a node that runs the
service, wherever its model comes from) and kept in a cache folder in the temporary directory
(one per user, readable by its owner only), by API, service, spec generation and model, so a
changed spec fetches again."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from wharfcli.bench.prompts import CONFIG_FILE, TOKENIZER_FILE, PromptError, PromptTokenizer
from wharfcli.client import Client, CliError

# What the API serves (contracts.node_tokenizer.TOKENIZER_FILES): the folder is a whole
# tokenizer, as transformers loads one too; only tokenizer.json and its config count here.
ACCEPTED_FILES = (TOKENIZER_FILE, CONFIG_FILE, "special_tokens_map.json", "added_tokens.json",
                  "vocab.json", "merges.txt", "vocab.txt")  # fmt: skip


def cache_root() -> Path:
    return Path(tempfile.gettempdir()) / f"wharf-bench-tokenizers-{os.getuid()}"


def _private_folder(path: Path) -> Path:
    """The folder, made owner-only; CliError if someone else could have written in it (a
    planted tokenizer would skew every count)."""
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise CliError(f"{path} is not a private folder of yours; remove it, or pass --tokenizer")
    return path


def _cache_key(api: str, service: dict) -> str:
    model = ((service.get("spec") or {}).get("llm") or {}).get("model")
    seed = f"{api}|{service['name']}|{service.get('generation')}|{model}"
    return hashlib.sha256(seed.encode()).hexdigest()[:24]


def fetch_tokenizer(client: Client, service: dict) -> Path:
    """The folder holding the service's tokenizer files, fetched unless cached."""
    folder = _private_folder(cache_root()) / _cache_key(client.api, service)
    if (folder / TOKENIZER_FILE).is_file():
        return folder
    answer = client.get(f"services/{service['name']}/tokenizer")
    files = answer.get("files") if isinstance(answer, dict) else None
    if not isinstance(files, dict) or not isinstance(files.get(TOKENIZER_FILE), str):
        raise CliError(f"the API's answer has no {TOKENIZER_FILE}; pass --tokenizer DIR")
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder.parent))
    try:
        for name in ACCEPTED_FILES:  # never a name the answer made up: no path leaves here
            if isinstance(files.get(name), str):
                (partial / name).write_text(files[name], encoding="utf-8")
        os.replace(partial, folder)
    except OSError:
        if not (folder / TOKENIZER_FILE).is_file():  # a concurrent run that won is fine
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def load_tokenizer(client: Client | None, service: dict | None, folder: str | None):
    """--tokenizer's folder, else the service's tokenizer; CliError saying what to do."""
    try:
        if folder:
            return PromptTokenizer.from_dir(Path(folder))
        assert client is not None and service is not None
        return PromptTokenizer.from_dir(fetch_tokenizer(client, service))
    except PromptError as exc:
        raise CliError(str(exc)) from None
