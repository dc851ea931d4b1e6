"""The hub models a node holds (workers.models.hub_cache), on real folders: which repositories are
here (placement prefers their nodes), and the prune that removes a commit no instance uses,
keeping a repository's most recently used one, a young one and one being staged."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from workers.models import hub_cache


def commit_folder(cache: Path, repo: str, commit: str, age_s: float) -> Path:
    folder = cache / "hub" / repo / commit
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w")
    then = time.time() - age_s
    os.utime(folder, (then, then))
    return folder


def test_the_repositories_here_are_those_with_a_staged_commit(tmp_path):
    commit_folder(tmp_path, "hf/Qwen/Qwen2.5-0.5B", "a" * 40, 10)
    commit_folder(tmp_path, "modelscope/Qwen/Tiny", "b" * 40, 10)
    (tmp_path / "hub" / "hf" / "org" / "partial" / f".{'c' * 40}.partial").mkdir(parents=True)
    assert hub_cache.cached_repositories(tmp_path) == ["hf://Qwen/Qwen2.5-0.5B",
                                                       "modelscope://Qwen/Tiny"]  # fmt: skip
    assert hub_cache.cached_repositories(tmp_path / "none") == []


def test_the_prune_removes_only_commits_nothing_keeps(tmp_path):
    repo = "hf/org/model"
    newest = commit_folder(tmp_path, repo, "1" * 40, 100)  # most recently used
    young = commit_folder(tmp_path, repo, "2" * 40, 1800)  # used within the hour
    used = commit_folder(tmp_path, repo, "3" * 40, 7300)  # an instance reads it
    staging = commit_folder(tmp_path, repo, "4" * 40, 9000)  # its lock is held
    old = commit_folder(tmp_path, repo, "5" * 40, 9100)  # none of these: removed
    partial = tmp_path / "hub" / repo / f".{'6' * 40}.partial"
    partial.mkdir()  # a staging to continue: not the prune's
    in_use = [used / "model.safetensors"]
    with (staging.parent / f"{staging.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert hub_cache.prune(tmp_path, in_use) == [old]
    assert [p.exists() for p in (newest, young, used, staging, partial)] == [True] * 5
    assert not list((tmp_path / "hub" / repo).glob(".*.old-*"))
    # However old, the most recently used commit and one in use stay.
    assert hub_cache.prune(tmp_path, in_use, min_age=0) == [young, staging]
    assert [p.exists() for p in (newest, used)] == [True, True]
