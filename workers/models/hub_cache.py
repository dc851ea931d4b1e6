"""The hub models a node holds, in `<cache>/hub/<scheme>/<org>/<name>/<commit>/` (workers.models.hub
stages them): which repositories are here, for placement, and the hourly prune of commits no
instance uses."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from contracts.hub_refs import COMMIT
from workers.models.storage import DEFAULT_PRUNE_MIN_AGE, discard, locked

HUB_FOLDER = "hub"  # under the node's cache (WHARF_CACHE_DIR)


def _folders(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _repositories(cache_root: Path) -> Iterator[tuple[str, Path]]:
    """("hf://org/name", its folder) of each repository with a folder here."""
    for scheme in _folders(cache_root / HUB_FOLDER):
        for org in _folders(scheme):
            for repo in _folders(org):
                yield f"{scheme.name}://{org.name}/{repo.name}", repo


def _commits(repo: Path) -> list[Path]:
    """Its staged commits, the most recently used first."""
    found = [p for p in _folders(repo) if COMMIT.fullmatch(p.name)]
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def cached_repositories(cache_root: Path) -> list[str]:
    """`hf://org/name` (or `modelscope://…`) of every repository with a staged commit here."""
    return [name for name, folder in _repositories(cache_root) if _commits(folder)]


def prune(
    cache_root: Path, in_use: Iterable[str | os.PathLike[str]],
    min_age: float = DEFAULT_PRUNE_MIN_AGE,
) -> list[Path]:  # fmt: skip
    """Remove staged commits no instance uses (`in_use`: the host paths instances here read);
    the folders removed. Kept whatever `in_use` says: a repository's most recently used
    commit, one used less than `min_age` seconds ago, one being staged (its lock is busy)."""
    used = {Path(os.path.realpath(path)) for path in in_use}
    removed = []
    for _, repo in _repositories(cache_root):
        for commit in _commits(repo)[1:]:
            real = Path(os.path.realpath(commit))
            if any(path == real or path.is_relative_to(real) for path in used):
                continue
            if time.time() - commit.stat().st_mtime < min_age:
                continue
            with locked(repo / f"{commit.name}.lock", wait=False) as held:
                if held and discard(commit, f".{commit.name}.old-"):  # else being staged
                    removed.append(commit)
    return removed
