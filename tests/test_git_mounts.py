"""workers.models.git_mounts against real git: repositories on disk (file://), served by `git
daemon` (git://) and over HTTP behind a password (git's dumb HTTP protocol, from a local server that
checks Basic credentials). Branch and commit are honoured, credentials work and are never
written down or echoed, and a bad repository is a clear error."""

from __future__ import annotations

import base64
import functools
import os
import subprocess
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from contracts.spec_storage import GitRepository
from tests.moto_support import free_port
from workers.models.git_mounts import GitMountError, clone

USER, PASSWORD = "deployer", "tok-3f9a-never-print-me"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    done = subprocess.run(["git", *ident, *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def origin(tmp_path: Path) -> dict[str, str]:
    """A bare repository: main with two commits (version.txt 1 then 2), feature with one more;
    {name: commit id} and its path under 'path'."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    found = {}
    for version in ("1", "2"):
        (work / "version.txt").write_text(version)
        git(work, "add", "version.txt")
        git(work, "commit", "-q", "-m", f"v{version}")
        found[f"v{version}"] = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "-b", "feature")
    (work / "feature.txt").write_text("on feature")
    git(work, "add", "feature.txt")
    git(work, "commit", "-q", "-m", "feature")
    found["feature"] = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")
    bare = tmp_path / "served" / "repo.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "update-server-info")  # for the dumb HTTP server below
    return {**found, "path": str(bare)}


def test_the_default_branch_is_cloned_at_its_newest_commit(origin, tmp_path):
    folder = clone(GitRepository(repo=f"file://{origin['path']}"), tmp_path / "cache")
    assert (folder / "version.txt").read_text() == "2"
    assert not (folder / "feature.txt").exists()
    assert folder.name.endswith("@" + origin["v2"][:16])


def test_a_branch_is_honoured(origin, tmp_path):
    repo = GitRepository(repo=f"file://{origin['path']}", branch="feature")
    folder = clone(repo, tmp_path / "cache")
    assert (folder / "feature.txt").read_text() == "on feature"


def test_a_commit_is_honoured_and_its_clone_reused(origin, tmp_path):
    repo = GitRepository(repo=f"file://{origin['path']}", branch="main", commit=origin["v1"])
    folder = clone(repo, tmp_path / "cache")
    assert (folder / "version.txt").read_text() == "1"
    assert clone(repo, tmp_path / "cache") == folder  # the same commit: the same folder
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.is_dir()] == [folder.name]


def test_a_commit_off_the_branch_is_fetched_by_id(origin, tmp_path):
    repo = GitRepository(repo=f"file://{origin['path']}", branch="main", commit=origin["feature"])
    assert (clone(repo, tmp_path / "cache") / "feature.txt").exists()


@pytest.mark.parametrize(("change", "says"), [
    ({"repo": "file:///no/such/repo.git"}, "file:///no/such/repo.git"),
    ({"branch": "no-such-branch"}, "no-such-branch"),
    ({"commit": "0123456789abcdef0123456789abcdef01234567"}, "not found"),
])  # fmt: skip
def test_a_bad_repository_branch_or_commit_is_a_clear_error(origin, tmp_path, change, says):
    repo = GitRepository(**{"repo": f"file://{origin['path']}", **change})
    with pytest.raises(GitMountError, match=says):
        clone(repo, tmp_path / "cache")
    assert [p for p in (tmp_path / "cache").iterdir() if p.is_dir()] == []  # nothing left


def test_git_daemon_repositories_clone(origin, tmp_path):
    port = free_port()
    served = Path(origin["path"]).parent
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
         f"--port={port}", f"--base-path={served}", str(served)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        repo = GitRepository(repo=f"git://127.0.0.1:{port}/repo.git", commit=origin["v1"])
        for _ in range(50):  # the daemon takes a moment to listen
            try:
                folder = clone(repo, tmp_path / "cache")
                break
            except GitMountError:
                time.sleep(0.1)
        assert (folder / "version.txt").read_text() == "1"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


class _BasicAuth(SimpleHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        expected = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != f"Basic {expected}":
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def http_origin(origin):
    handler = functools.partial(_BasicAuth, directory=str(Path(origin["path"]).parent))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/repo.git"
    server.shutdown()
    server.server_close()


def test_credentials_open_a_private_repository_and_are_written_nowhere(http_origin, tmp_path):
    repo = GitRepository(repo=http_origin, username=USER, password=PASSWORD)
    folder = clone(repo, tmp_path / "cache")
    assert (folder / "version.txt").read_text() == "2"
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_refused_credentials_are_a_clear_error_without_the_password(http_origin, tmp_path):
    repo = GitRepository(repo=http_origin, username=USER, password="wrong-" + PASSWORD)
    with pytest.raises(GitMountError) as caught:
        clone(repo, tmp_path / "cache")
    assert http_origin in str(caught.value)
    assert PASSWORD not in str(caught.value)
    assert "Authentication failed" in str(caught.value) or "401" in str(caught.value)
