"""`storage[].git`: a repository cloned on the node when an instance starts, for a read-only
bind mount (EAS: "cloned at instance start, read-only; restart to refresh").

Every start clones again with the spec's own credentials, so a copy on the node is handed
only to a workspace that could just fetch it. The clone lands in the node cache as
`<cache_key>@<commit>` (the naming workers.models.storage uses), so the hourly prune removes clones
no instance mounts any more; a commit already there is reused and the new clone discarded.

The credentials reach git through GIT_ASKPASS and the environment of that one git process:
never in its command line, the clone's `.git/config`, a log line or an error message. Only
the repository's own protocol is allowed (no submodules, no redirects to other hosts), with
no system or user git configuration and no hooks.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from contracts.spec import REDACTED
from contracts.spec_storage import GitRepository
from workers.models.storage import locked

CLONE_TIMEOUT = 600.0  # seconds for one git command; a stuck server fails the instance
MAX_MESSAGE = 400
ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$WHARF_GIT_USERNAME" ;;
  *) printf '%s\\n' "$WHARF_GIT_PASSWORD" ;;
esac
"""


class GitMountError(Exception):
    """A clone that failed for a reason the user must fix (the repository, branch, commit
    or credentials); its message names the repository and never the password."""


def cache_key(repo: GitRepository) -> str:
    """The folder stem of a repository and branch in the node cache (workers.models.storage's
    form)."""
    identity = f"{repo.repo}\n{repo.branch or ''}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    leaf = urlsplit(repo.repo).path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", leaf or "repo")[:60].strip(".") or "repo"
    return f"git-{stem}-{digest}"


def clone(repo: GitRepository, cache_root: Path) -> Path:
    """Clone `repo` at its branch (default: the repository's default branch) and commit
    (default: the branch's newest) into the node cache; the folder. Raises GitMountError."""
    cache_root.mkdir(parents=True, exist_ok=True)
    key = cache_key(repo)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.clone-", dir=cache_root))
    try:
        checkout = work / "repo"
        branch = ("--branch", repo.branch) if repo.branch else ()
        _git(repo, work, "clone", "--quiet", "--no-tags", "--single-branch", *branch, "--",
             repo.repo, str(checkout))  # fmt: skip
        if repo.commit:
            _check_out(repo, work, checkout)
        head = _git(repo, work, "-C", str(checkout), "rev-parse", "HEAD").strip()
        final = cache_root / f"{key}@{head[:16]}"
        with locked(cache_root / f"{key}.lock"):
            if not final.is_dir():
                checkout.chmod(0o755)  # engines in containers may run as another user
                os.rename(checkout, final)
            os.utime(final)  # used now: the prune keeps a source's most recently used copy
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_out(repo: GitRepository, work: Path, checkout: Path) -> None:
    """Detach at the spec's commit: in the cloned branch, else fetched by name or id."""
    assert repo.commit is not None
    try:
        _git(repo, work, "-C", str(checkout), "checkout", "--quiet", "--detach", repo.commit)
        return
    except GitMountError:
        pass
    try:
        _git(repo, work, "-C", str(checkout), "fetch", "--quiet", "--no-tags", "origin",
             repo.commit)  # fmt: skip
        _git(repo, work, "-C", str(checkout), "checkout", "--quiet", "--detach", "FETCH_HEAD")
    except GitMountError:
        branch = f" on branch {repo.branch}" if repo.branch else ""
        raise GitMountError(
            f"git repository {repo.repo}: commit {repo.commit!r} not found{branch}; give a "
            "commit the repository has"
        ) from None


def _git(repo: GitRepository, work: Path, *args: str) -> str:
    scheme = urlsplit(repo.repo).scheme
    command = [
        "git", "-c", "protocol.allow=never", "-c", f"protocol.{scheme}.allow=always",
        "-c", "http.followRedirects=false", "-c", "core.hooksPath=/dev/null",
        "-c", "credential.helper=", "-c", "submodule.recurse=false", *args,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, env=_environment(repo, work), capture_output=True, text=True,
            timeout=CLONE_TIMEOUT, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise GitMountError(
            f"git repository {repo.repo}: no answer within {CLONE_TIMEOUT:.0f} s"
        ) from None
    if done.returncode != 0:
        raise GitMountError(f"git repository {repo.repo}: {_said(done.stderr, repo)}")
    return done.stdout


def _environment(repo: GitRepository, work: Path) -> dict[str, str]:
    """git's environment: no configuration but ours, credentials from the askpass script."""
    askpass = work / "askpass"
    if not askpass.exists():
        askpass.write_text(ASKPASS)
        askpass.chmod(0o700)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": str(askpass), "LC_ALL": "C",
        "WHARF_GIT_USERNAME": repo.username or "", "WHARF_GIT_PASSWORD": repo.password or "",
    }  # fmt: skip


def _said(stderr: str, repo: GitRepository) -> str:
    """git's own words, short, with the password (should it ever echo it) masked."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    text = " ".join(lines[-3:]) or "git failed"
    if repo.password:
        text = text.replace(repo.password, REDACTED)
    return text[:MAX_MESSAGE]
