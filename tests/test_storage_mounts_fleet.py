"""EAS's git and writable object-storage mounts through the API and the real worker code (the
scheduler, the node agent and the starter, on an in-memory runtime): a repository cloned at
start at its commit and bind-mounted read-only, its password masked and in no event; a bad
commit a failed instance saying so; a writable s3 copy uploaded back when the instance stops.
Real git (a file:// repository) and a real S3 server (moto's)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from django.db import connection

from tests.api_support import grant
from tests.fleet_support import Fleet
from tests.moto_support import KEY_ID, SECRET
from workers.models import provisioning

pytestmark = pytest.mark.django_db
PASSWORD = "tok-never-in-an-event-7c1d"
CONTAINER = [{"image": "busybox", "command": "sleep 1d", "port": 8001}]


@pytest.fixture
def node_dirs(settings, tmp_path, redis_url):
    settings.REDIS_URL = redis_url
    settings.WHARF_CACHE_DIR = tmp_path / "cache"
    settings.WHARF_WRITABLE_DIR = tmp_path / "writable"
    return tmp_path


@pytest.fixture
def repo(tmp_path) -> tuple[str, list[str]]:
    """A repository at tmp/git/code.git with two commits; its file:// URL and commit ids."""
    work = tmp_path / "git" / "code.git"
    work.mkdir(parents=True)
    run = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(work)]
    subprocess.run([*run, "init", "-q", "-b", "main"], check=True)
    commits = []
    for version in ("1", "2"):
        (work / "version.txt").write_text(version)
        subprocess.run([*run, "add", "version.txt"], check=True)
        subprocess.run([*run, "commit", "-q", "-m", version], check=True)
        head = subprocess.run([*run, "rev-parse", "HEAD"], check=True, capture_output=True)
        commits.append(head.stdout.decode().strip())
    return f"file://{work}", commits


def git_spec(url: str, commit: str) -> dict:
    git = {"repo": url, "commit": commit, "username": "me", "password": PASSWORD}
    return {"name": "code", "containers": CONTAINER,
            "storage": [{"mount_path": "/code", "git": git}]}  # fmt: skip


def test_a_repository_on_the_node_needs_the_grant(api, store, repo):
    url, commits = repo
    refused = api.post("/api/v1/services", git_spec(url, commits[0]), format="json")
    assert refused.status_code == 403
    assert "grants.git_repositories" in refused.json()["errors"]["storage[0].git.repo"][0]


def test_a_repository_is_cloned_at_its_commit_and_mounted_read_only(api, store, node_dirs, repo):
    url, commits = repo
    grant(git_repositories=[url.rsplit("/", 1)[0]])
    assert api.post("/api/v1/services", git_spec(url, commits[0]), format="json").status_code == 201
    fleet = Fleet()
    fleet.node("a")
    fleet.settle(3)
    assert fleet.states("code") == [("a", "ready")]
    (row,) = fleet.rows("code")
    (mount,) = [m for m in fleet.runtimes["a"].requests[row.name].plan.mounts
                if m.target == "/code"]  # fmt: skip
    assert mount.kind == "bind" and mount.read_only
    assert (Path(mount.source) / "version.txt").read_text() == "1"
    shown = api.get("/api/v1/services/code").json()
    assert PASSWORD not in str(shown)
    assert PASSWORD not in str(api.get("/api/v1/services/code/events").json())
    with connection.cursor() as cursor:  # the rows as a dump would show them: sealed
        cursor.execute("SELECT spec FROM services_service UNION ALL "
                       "SELECT spec FROM services_serviceversion")  # fmt: skip
        rows = str(cursor.fetchall())
    assert PASSWORD not in rows and "storage" in rows


def test_a_commit_the_repository_lacks_fails_the_instance_saying_so(api, store, node_dirs, repo):
    url, _ = repo
    grant(git_repositories=[url])
    spec = git_spec(url, "0123456789abcdef0123456789abcdef01234567")
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    fleet = Fleet()
    fleet.node("a")
    fleet.settle(3)
    assert fleet.states("code") == [("a", "failed")]
    message = fleet.rows("code")[0].message
    assert "storage[0].git" in message and "not found" in message and PASSWORD not in message


def _writer(api, moto, s3) -> str:
    """A service mounting a new bucket's prefix writable; the bucket's name."""
    bucket = f"wharf-w-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="out/seed.txt", Body=b"seed")
    grant(storage_endpoints=[moto.url])
    store_entry = {"path": f"s3://{bucket}/out/", "endpoint": moto.url, "readOnly": False,
                   "access_key_id": KEY_ID, "access_key_secret": SECRET}  # fmt: skip
    spec = {"name": "writer", "containers": CONTAINER,
            "storage": [{"mount_path": "/out", "s3": store_entry}]}  # fmt: skip
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    return bucket


@pytest.fixture
def quiet_staging(monkeypatch):
    # Staging reports its progress from s3transfer's threads, which SQLite's in-memory test
    # database cannot take writes from (PostgreSQL can): no progress here.
    monkeypatch.setattr(provisioning, "_throttled", lambda uri, report: lambda done, total: None)


def test_a_writable_copy_goes_back_to_the_bucket_when_the_instance_stops(
    api, store, node_dirs, moto, s3, quiet_staging
):
    bucket = _writer(api, moto, s3)
    fleet = Fleet()
    fleet.node("a")
    fleet.settle(3)
    (row,) = fleet.rows("writer")
    (mount,) = fleet.runtimes["a"].requests[row.name].plan.mounts
    assert mount.kind == "bind" and not mount.read_only
    assert (Path(mount.source) / "seed.txt").read_bytes() == b"seed"
    (Path(mount.source) / "result.txt").write_bytes(b"the engine's output")
    assert api.post("/api/v1/services/writer/stop").status_code in (200, 202)
    fleet.settle(4)
    assert fleet.rows("writer") == []
    body = s3.get_object(Bucket=bucket, Key="out/result.txt")["Body"].read()
    assert body == b"the engine's output"
    assert not (node_dirs / "writable" / row.name).exists()


def test_a_running_instances_writes_go_up_every_period(
    api, store, node_dirs, moto, s3, quiet_staging, settings
):
    settings.WHARF_STORAGE_SYNC_SECONDS = 0
    bucket = _writer(api, moto, s3)
    fleet = Fleet()
    fleet.node("a")
    fleet.settle(3)
    (row,) = fleet.rows("writer")
    (mount,) = fleet.runtimes["a"].requests[row.name].plan.mounts
    (Path(mount.source) / "progress.txt").write_bytes(b"half way")
    fleet.settle(1)
    assert fleet.states("writer") == [("a", "ready")]
    assert s3.get_object(Bucket=bucket, Key="out/progress.txt")["Body"].read() == b"half way"


@pytest.mark.parametrize(("resolved", "grants", "refused"), [
    (["10.0.0.7"], {}, True),
    (["10.0.0.7"], {"registries": ["registry.corp"]}, False),
    (["8.8.8.8"], {}, False),
])  # fmt: skip
def test_an_image_mounts_registry_name_is_checked_where_it_resolves(db, resolved, grants, refused):
    from contracts.spec import parse_spec
    from controlplane.workspaces.policy import registry_refusals

    entry = {"mount_path": "/a", "image": {"image": "registry.corp/x:1", "path": "/opt"}}
    spec = parse_spec({"name": "img", "containers": CONTAINER, "storage": [entry]})
    found = registry_refusals(spec, grant(**grants), resolve=lambda host: resolved)
    assert list(found) == (["storage[0].image.image"] if refused else [])


@pytest.mark.parametrize(("resolved", "grants", "refused"), [
    (["127.0.0.1"], {}, True),
    (["127.0.0.1"], {"git_repositories": ["https://git.corp"]}, False),
    (["8.8.8.8"], {}, False),
])  # fmt: skip
def test_a_git_servers_name_is_checked_where_it_resolves(db, resolved, grants, refused):
    from contracts.spec import parse_spec
    from controlplane.workspaces.policy import git_refusals

    entry = {"mount_path": "/c", "git": {"repo": "https://git.corp/team/code.git"}}
    spec = parse_spec({"name": "code", "containers": CONTAINER, "storage": [entry]})
    found = git_refusals(spec, grant(**grants), resolve=lambda host: resolved)
    assert list(found) == (["storage[0].git.repo"] if refused else [])
    if refused:
        assert "grants.git_repositories" in found["storage[0].git.repo"][0]


def test_a_tokenizer_on_a_git_mount_is_refused_by_name(tmp_path):
    from contracts.spec import parse_spec
    from workers.nodes.node_tokenizer import TokenizerFilesError, _mounted

    entry = {"mount_path": "/code", "git": {"repo": "https://git.example.com/x.git"}}
    spec = parse_spec({"name": "code", "containers": CONTAINER, "storage": [entry]})
    with pytest.raises(TokenizerFilesError, match="its git mount is not read for tokenizers"):
        _mounted(spec, "/code/model", [], tmp_path)
