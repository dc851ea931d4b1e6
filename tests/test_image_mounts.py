"""workers.models.image_mounts against the real dockerd: a folder copied out of an image on this
machine (imported here from a few files, as nothing can be pulled), reused while the image
is the same, and clear errors for a folder the image lacks or a file that is no folder."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import pytest

docker = pytest.importorskip("docker")

from contracts.spec_storage import ImageFolder  # noqa: E402
from workers.models.image_mounts import copy_out  # noqa: E402
from workers.runtimes.base import InstanceError  # noqa: E402

FILES = {"opt/assets/a.txt": b"alpha", "opt/assets/sub/b.txt": b"beta", "opt/file.txt": b"f"}


@pytest.fixture(scope="module")
def client():
    try:
        found = docker.from_env()
        found.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker daemon: {exc}")
    return found


@pytest.fixture
def image(client):
    """An image holding FILES, named for this branch, removed afterwards."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, body in FILES.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    name = f"wharf-eas-storage/mount-test:{uuid.uuid4().hex[:8]}"
    repository, tag = name.split(":")
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=tag)
    yield name
    client.images.remove(name, force=True)


def _copy(client, image: str, path: str, cache: Path) -> Path:
    return copy_out(client, ImageFolder(image=image, path=path), cache, None, lambda _: None,
                    tenant=False)  # fmt: skip


def test_a_folder_is_copied_out_of_the_image(client, image, tmp_path):
    folder = _copy(client, image, "/opt/assets", tmp_path / "cache")
    assert (folder / "a.txt").read_bytes() == b"alpha"
    assert (folder / "sub" / "b.txt").read_bytes() == b"beta"
    assert not (folder / "file.txt").exists()
    image_id = client.images.get(image).id.split(":")[-1]
    assert folder.name.endswith("@" + image_id[:16])


def test_the_same_image_is_copied_once_and_no_container_is_left(client, image, tmp_path):
    before = {c.id for c in client.containers.list(all=True)}
    first = _copy(client, image, "/opt/assets/", tmp_path / "cache")
    (first / "marker").write_text("kept")
    again = _copy(client, image, "/opt/assets/", tmp_path / "cache")
    assert again == first and (again / "marker").exists()
    assert {c.id for c in client.containers.list(all=True)} == before


@pytest.mark.parametrize(("path", "says"), [
    ("/opt/missing", "has no /opt/missing"),
    ("/opt/file.txt", "is not a folder"),
])  # fmt: skip
def test_a_missing_folder_or_a_file_is_a_clear_error(client, image, tmp_path, path, says):
    with pytest.raises(InstanceError, match=says):
        _copy(client, image, path, tmp_path / "cache")
    assert [p for p in (tmp_path / "cache").iterdir() if p.is_dir()] == []


def test_an_image_the_node_lacks_and_no_registry_has_fails_naming_it(client, tmp_path):
    missing = "127.0.0.1:1/wharf-eas-storage/none:1"
    with pytest.raises(Exception, match="wharf-eas-storage/none"):
        _copy(client, missing, "/opt", tmp_path / "cache")


def test_node_folders_are_mounted_into_a_container_as_the_plan_says(client, tmp_path):
    """A clone or image folder read-only, a writable copy read-write, for the engine's user
    (the Wharf image runs as uid 10001, not the worker's)."""
    from contracts.engines import render
    from contracts.engines.plan import Placement
    from contracts.spec import parse_spec
    from workers.models.writable_storage import prepare
    from workers.runtimes.base import InstanceRequest
    from workers.runtimes.docker import run_options

    code, staged = tmp_path / "code", tmp_path / "staged"
    code.mkdir()
    (code / "version.txt").write_text("1\n")
    (staged / "sub").mkdir(parents=True)
    (staged / "sub" / "old.txt").write_text("old")
    copy = prepare(tmp_path / "writable", "svc-1", 1, staged)
    container = {"image": "wharf/wharf:0.1.0", "command": "sh", "port": 8001}
    spec = parse_spec({
        "name": "svc", "containers": [container],
        "storage": [{"mount_path": "/code", "git": {"repo": "https://git.example.com/x.git"}},
                    {"mount_path": "/out", "s3": {"path": "s3://bb/o/", "readOnly": False}}],
    })  # fmt: skip
    placement = Placement(staged={"storage[0].git": str(code), "storage[1].writable": str(copy)})
    request = InstanceRequest("svc", "svc-1", "h", render(spec, placement), "")
    mounts = run_options(request, model_dir=str(tmp_path), bind_address="127.0.0.1")["mounts"]
    script = (
        "cat /code/version.txt; touch /code/x 2>/dev/null && echo code-rw || echo code-ro; "
        "echo new > /out/sub/new.txt && echo changed > /out/sub/old.txt && echo out-rw"
    )
    try:
        said = client.containers.run("wharf/wharf:0.1.0", ["-c", script], entrypoint=["sh"],
                                     mounts=mounts, remove=True, network_disabled=True)  # fmt: skip
    except docker.errors.ImageNotFound:
        pytest.skip("the Wharf image is not built on this machine")
    assert said.decode().split() == ["1", "code-ro", "out-rw"]
    assert (copy / "sub" / "new.txt").read_text() == "new\n"
    assert (copy / "sub" / "old.txt").read_text() == "changed\n"
    assert not (code / "x").exists()
