"""EAS's `storage[].dataset` (a PAI dataset): on Wharf the volume wharf-dataset-<id>-<version>
an operator made and filled. The spec takes it, the plan mounts it read-only unless asked,
Kubernetes mounts the claim of that name, the process runtime refuses it by name, and on the
real dockerd an instance reads the volume's files (and a missing volume is a clear error,
never an empty folder)."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Iterator

import pytest

from contracts.engines import render
from contracts.engines.plan import ContainerPlan, Mount
from contracts.spec import SpecError, parse_spec
from contracts.spec_rules import runtime_checks
from tests.kube_manifest_support import objects, pod, spec_with
from workers.models.storage_mounts import check_dataset
from workers.runtimes.base import InstanceError, InstanceRequest
from workers.runtimes.docker import run_options

SPEC = {
    "name": "reader",
    "containers": [{"image": "img", "command": "ls /data", "port": 8000}],
    "storage": [{"mount_path": "/data", "dataset": {"id": "d-4rb4dk", "version": "v2"}}],
}


def with_dataset(**dataset) -> dict:
    return {**SPEC, "storage": [{"mount_path": "/data", "dataset": dataset}]}


@pytest.mark.parametrize(("dataset", "mount"), [
    ({"id": "d-4rb4dk", "version": "v2"}, Mount("dataset", "/data", "wharf-dataset-d-4rb4dk-v2")),
    ({"id": "d-1"}, Mount("dataset", "/data", "wharf-dataset-d-1-v1")),  # EAS's first version
    ({"id": "d-1", "read_only": False},
     Mount("dataset", "/data", "wharf-dataset-d-1-v1", read_only=False)),
])  # fmt: skip
def test_a_dataset_is_its_named_volume_read_only_unless_asked(dataset, mount):
    (found,) = render(parse_spec(with_dataset(**dataset))).mounts
    assert found == mount


@pytest.mark.parametrize(("dataset", "field"), [
    ({"id": "${DATASET_ID}"}, "storage[0].dataset.id"),  # a template's placeholder
    ({"id": "D-Upper"}, "storage[0].dataset.id"),
    ({"id": "d-1", "version": "v 1"}, "storage[0].dataset.version"),
    ({"version": "v1"}, "storage[0].dataset.id"),
    ({"id": "d-1", "read_only": "no"}, "storage[0].dataset.read_only"),
    ({"id": "d-1", "uri": "oss://b/"}, "storage[0].dataset.uri"),
])  # fmt: skip
def test_a_bad_dataset_is_refused_by_name(dataset, field):
    with pytest.raises(SpecError) as caught:
        parse_spec(with_dataset(**dataset))
    assert field in caught.value.errors


def test_a_spec_without_datasets_hashes_as_before():
    plain = {**SPEC, "storage": [{"mount_path": "/s", "empty_dir": {}}]}
    assert parse_spec(plain).spec_hash() == "6ebb14f9d457"  # as before datasets existed


@pytest.mark.parametrize(("runtime", "refused"), [
    ("docker", False), ("", False), ("kubernetes", False), ("process", True),
])  # fmt: skip
def test_the_process_runtime_refuses_a_dataset_by_name(runtime, refused):
    errors = runtime_checks(parse_spec(SPEC), runtime)
    assert ("storage[0].dataset" in errors) is refused
    if refused:
        assert "wharf-dataset-d-4rb4dk-v2" in errors["storage[0].dataset"][0]


def test_kubernetes_mounts_the_claim_of_the_same_name():
    storage = [{"mount_path": "/data", "dataset": {"id": "d-1", "read_only": False}}]
    template = pod(objects(spec_with(storage=storage)))
    (volume,) = [v for v in template["volumes"] if "persistentVolumeClaim" in v
                 and v["persistentVolumeClaim"]["claimName"] == "wharf-dataset-d-1-v1"]  # fmt: skip
    (mount,) = [m for m in template["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert (mount["mountPath"], mount["readOnly"]) == ("/data", False)


def test_docker_mounts_the_named_volume(tmp_path):
    plan = ContainerPlan(
        "img", ["ls"], 8000, mounts=[Mount("dataset", "/data", "wharf-dataset-d-1-v1")]
    )
    options = run_options(InstanceRequest("reader", "reader-1", "h", plan), model_dir=str(tmp_path),
                          bind_address="127.0.0.1")  # fmt: skip
    (mount,) = options["mounts"]
    assert (mount["Type"], mount["Source"], mount["Target"], mount["ReadOnly"]) == (
        "volume",
        "wharf-dataset-d-1-v1",
        "/data",
        True,
    )


# On the real dockerd (volumes and containers named for this branch, removed afterwards).
docker = pytest.importorskip("docker")


@pytest.fixture(scope="module")
def client():
    try:
        found = docker.from_env()
        found.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker daemon: {exc}")
    return found


@pytest.fixture
def dataset(client) -> Iterator[dict]:
    """A dataset as an operator provides one: its volume made and filled (through a container
    that is created, never started), removed afterwards."""
    from docker.types import Mount as DockerMount

    from tests.docker_support import empty_image

    spec = {"id": f"d-eas-jobs-{uuid.uuid4().hex[:8]}", "version": "v1"}
    volume = f"wharf-dataset-{spec['id']}-v1"
    client.volumes.create(volume)
    mount = DockerMount("/data", volume, type="volume")
    filler = client.containers.create(empty_image(client), command=["none"], mounts=[mount])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("train.jsonl")
        info.size = len(b'{"x": 1}\n')
        tar.addfile(info, io.BytesIO(b'{"x": 1}\n'))
        results = tarfile.TarInfo("results")  # where engines (not root) may write
        results.type, results.mode = tarfile.DIRTYPE, 0o777
        tar.addfile(results)
    filler.put_archive("/data", buffer.getvalue())
    filler.remove()
    yield spec
    for container in client.containers.list(all=True, filters={"volume": volume}):
        container.remove(force=True)
    client.volumes.get(volume).remove(force=True)


@pytest.fixture
def runtime(client, tmp_path):
    from workers.runtimes.docker import DockerRuntime

    found = DockerRuntime(str(tmp_path / "models"), node="eas-jobs")
    yield found
    for instance in found.list():
        found.remove(instance.name)
        found.forget(instance.service)


def test_a_missing_dataset_volume_is_a_clear_error_naming_it(runtime):
    spec = parse_spec(with_dataset(id="d-eas-jobs-missing"))
    with pytest.raises(InstanceError, match="dataset volume 'wharf-dataset-d-eas-jobs-missing-v1' "
                       "is not on this node") as caught:  # fmt: skip
        check_dataset(runtime, spec.storage[0].dataset, "storage[0].dataset")
    assert "storage[0].dataset" in str(caught.value)
    assert not runtime.client.volumes.list(filters={"name": "wharf-dataset-d-eas-jobs-missing"})


@pytest.mark.parametrize("read_only", [True, False])
def test_an_instance_reads_the_dataset_and_writes_only_when_asked(runtime, dataset, read_only):
    base = "wharf/wharf:0.1.0"  # setup's image: a shell to run
    try:
        runtime.client.images.get(base)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{base} is not built here")
    data = {**SPEC, "containers": [{"image": base, "command": "exec sleep 300", "port": 8000}],
            "metadata": {"cpu": 1},
            "storage": [{"mount_path": "/data",
                         "dataset": {**dataset, "read_only": read_only}}]}  # fmt: skip
    spec = parse_spec(data)
    check_dataset(runtime, spec.storage[0].dataset, "storage[0].dataset")  # present: no error
    name = f"eas-jobs-reader-{uuid.uuid4().hex[:6]}"
    try:
        runtime.create(InstanceRequest("eas-jobs-reader", name, "h", render(spec)))
        assert runtime.read_file(name, "/data/train.jsonl", 100) == b'{"x": 1}\n'
        wrote = runtime.exec_check(name, ("/bin/sh", "-c", "touch /data/results/out"), 10)
        assert wrote is not read_only
    finally:  # before the dataset's volume goes (and its containers with it)
        runtime.remove(name)
        runtime.forget("eas-jobs-reader")


def read_volume(client, volume: str, path: str) -> bytes:
    """A file of a volume, through a created (never started) container's archive."""
    from docker.types import Mount as DockerMount

    from tests.docker_support import empty_image

    mount = DockerMount("/v", volume, type="volume")
    reader = client.containers.create(empty_image(client), command=["none"], mounts=[mount])
    try:
        stream, _ = reader.get_archive(f"/v/{path}")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None
            return member.read()
    finally:
        reader.remove()


@pytest.mark.django_db
def test_a_job_on_docker_writes_its_dataset_and_has_succeeded(runtime, dataset, settings):
    """The corpus's elastic job, in small: a job that writes its result into a writable
    dataset, through the real starter and node agent on dockerd."""
    from controlplane.services.choices import InstanceState
    from tests.api_support import grant
    from tests.probes_support import history, placed, state, until

    base = "wharf/wharf:0.1.0"
    try:
        runtime.client.images.get(base)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{base} is not built here")
    grant(datasets=[{"id": "d-eas-jobs-*", "read_write": True}])
    command = "cat /data/train.jsonl > /data/results/out.jsonl"
    writable = {**dataset, "read_only": False}
    spec = {
        "name": f"eas-jobs-export-{uuid.uuid4().hex[:4]}",
        "containers": [{"image": base, "port": 8000, "command": command}],
        "metadata": {"workload_type": "elasticjob"},
        "storage": [{"mount_path": "/data", "dataset": writable}],
    }
    row = placed(spec, node="eas-jobs")
    try:
        row = until(runtime, row, state(InstanceState.SUCCEEDED, InstanceState.FAILED),
                    timeout=90, node="eas-jobs")  # fmt: skip
        assert row.state == InstanceState.SUCCEEDED, history(row)
        container = runtime.client.containers.get(row.name)
        assert container.status == "exited"  # kept as it ended, with its logs
        assert container.attrs["HostConfig"]["RestartPolicy"]["Name"] == "no"
    finally:  # its front too, before the dataset's volume goes
        runtime.remove(row.name)
        runtime.forget(row.service.name)
    volume = f"wharf-dataset-{dataset['id']}-v1"
    assert read_volume(runtime.client, volume, "results/out.jsonl") == b'{"x": 1}\n'
