"""Images a node lacks are pulled: from a real registry running in the test (the registry API
v2 behind HTTP Basic auth, tests/registry_support.py) through the real Docker daemon, with the
spec's dockerAuth or the node's own docker login; the progress the service shows meanwhile;
and dockerAuth in the spec: validated, masked in every API answer, kept on update."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.engines.plan import ContainerPlan
from contracts.engines.vllm_ascend import NPU_SMI_PATHS
from contracts.spec import REDACTED, parse_spec
from tests.api_support import default_workspace
from tests.registry_support import Registry, docker_auth
from workers.runtimes.base import InstanceError
from workers.runtimes.pulls import PullError, PullProgress, pull, size_text

SECRET = "correct-horse-battery"
AUTH = docker_auth("wharf", SECRET)
LAYER_BYTES = 3_000_000  # random, so gzip leaves it this size: about 1.5 s at RATE
RATE = 2_000_000


# Progress, from the daemon's messages


def downloading(layer: str, current: int, total: int) -> dict:
    return {"status": "Downloading", "id": layer,
            "progressDetail": {"current": current, "total": total}}  # fmt: skip


def test_progress_sums_the_layers_being_downloaded():
    progress = PullProgress("registry.example/vllm:0.9")
    assert progress.text() == "pulling registry.example/vllm:0.9"
    progress.update({"status": "Pulling from vllm", "id": "0.9"})
    progress.update({"status": "Already exists", "id": "aaa"})
    progress.update({"status": "Pulling fs layer", "id": "bbb"})
    progress.update(downloading("bbb", 1_000_000_000, 2_000_000_000))
    progress.update(downloading("ccc", 170_000_000, 600_000_000))
    assert progress.text() == "pulling registry.example/vllm:0.9: 45% of 2.6 GB"
    for layer in ("bbb", "ccc"):
        progress.update({"status": "Download complete", "id": layer})
    progress.update({"status": "Extracting", "id": "bbb", "progressDetail": {"current": 1}})
    assert progress.text() == "pulling registry.example/vllm:0.9: extracting 2.6 GB"


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (999, "999 B"), (32_768, "32.8 kB"), (731_200_000, "731.2 MB"),
     (2_600_000_000, "2.6 GB"), (3_100_000_000_000, "3.1 TB")],
)  # fmt: skip
def test_sizes_read_as_docker_prints_them(size, text):
    assert size_text(size) == text


class FakeApi:
    """docker-py's low-level client as far as pull() uses it, for the throttle alone."""

    def __init__(self, events: list[dict], clock: list[float]):
        self.events, self.clock, self.reloaded = events, clock, 0

    def reload_config(self) -> None:
        self.reloaded += 1

    def pull(self, repository, tag, **kwargs):
        self.args = (repository, tag, kwargs)
        for event in self.events:
            self.clock[0] += 0.3  # a message every 0.3 s
            yield event


def test_progress_is_reported_at_most_once_a_second():
    clock = [0.0]
    events = [downloading("l", i * 10, 100) for i in range(1, 11)]
    api = FakeApi(events, clock)
    reports: list[str] = []
    pull(api, "r.example/e:2", None, reports.append, clock=lambda: clock[0])
    assert reports == ["pulling r.example/e:2", "pulling r.example/e:2: 40% of 100 B",
                       "pulling r.example/e:2: 80% of 100 B", "pulled r.example/e:2"]  # fmt: skip
    assert api.args == ("r.example/e", "2", {"stream": True, "decode": True, "auth_config": None})
    assert api.reloaded == 1  # without dockerAuth: the node's login, as it is now


def test_dockerauth_becomes_the_pulls_credentials():
    api = FakeApi([], [0.0])
    pull(api, "r.example/e", AUTH, lambda text: None)
    assert api.args[:2] == ("r.example/e", "latest")
    assert api.args[2]["auth_config"] == {"username": "wharf", "password": SECRET}


def test_a_tenants_pull_without_dockerauth_is_anonymous_not_the_nodes_login():
    api = FakeApi([], [0.0])
    pull(api, "r.example/e", None, lambda text: None, node_login=False)
    assert api.args[2]["auth_config"] == {} and api.reloaded == 0


@pytest.mark.parametrize(
    ("message", "permanent", "words"),
    [
        ("unauthorized: authentication required", True, "refused the credentials"),
        ("pull access denied for x, repository does not exist or may require 'docker login': "
         "denied: requested access to the resource is denied", True, "refused the credentials"),
        ("manifest for r.example/e:2 not found: manifest unknown", True, "no such image"),
        ("invalid reference format", True, "invalid reference"),
        ('Get "https://r.example/v2/": dial tcp: connect: connection refused', False, "refused"),
        ("received unexpected HTTP status: 503 Service Unavailable", False, "503"),
        ("toomanyrequests: You have reached your pull rate limit", False, "rate limit"),
    ],
)  # fmt: skip
def test_a_failed_pull_is_permanent_only_when_the_user_must_fix_the_spec(message, permanent, words):
    api = FakeApi([{"error": message, "errorDetail": {"message": message}}], [0.0])
    with pytest.raises(InstanceError if permanent else PullError) as caught:
        pull(api, "r.example/e:2", AUTH, lambda text: None)
    assert isinstance(caught.value, InstanceError) == permanent
    assert "r.example/e:2" in str(caught.value) and words in str(caught.value)
    assert SECRET not in str(caught.value) and AUTH not in str(caught.value)


# Real pulls: a registry in this process, the node's Docker daemon


@pytest.fixture(scope="module")
def client():
    from workers.runtimes.docker import DockerRuntime

    if not DockerRuntime.available():
        pytest.skip("no Docker daemon here")
    import docker

    return docker.from_env()


@pytest.fixture(scope="module")
def registry(client) -> Iterator[Registry]:
    """A registry serving wharf-test/pulled:1: an image of one random 3 MB layer, made by the
    daemon, saved, and removed from it again so that every pull downloads."""
    source = f"wharf-test/pull-source-{uuid.uuid4().hex[:8]}"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        data = os.urandom(LAYER_BYTES)
        member = tarfile.TarInfo("blob.bin")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    client.api.import_image_from_data(archive.getvalue(), repository=source, tag="1")
    try:
        saved = b"".join(client.images.get(f"{source}:1").save())
    finally:
        client.images.remove(f"{source}:1", force=True)
    registry = Registry(password=SECRET, rate=RATE).start()
    registry.add_saved(saved, "wharf-test/pulled", "1")
    yield registry
    registry.stop()


@pytest.fixture
def runtime(client, tmp_path, registry):
    from workers.runtimes.docker import DockerRuntime

    yield DockerRuntime(str(tmp_path / "models"), files_dir=tmp_path / "files")
    for name in ("pulled", "absent"):
        with contextlib.suppress(Exception):  # not pulled: nothing to remove
            client.images.remove(f"{registry.address}/wharf-test/{name}:1", force=True)


def image_plan(image: str) -> ContainerPlan:
    return ContainerPlan(image=image, args=["serve"], port=8000)


def test_a_missing_image_is_pulled_with_the_specs_dockerauth_and_its_progress_reported(
    runtime, registry, client
):
    image = f"{registry.address}/wharf-test/pulled:1"
    reports: list[str] = []
    runtime.prepare(image_plan(image), AUTH, reports.append)
    assert client.images.get(image).id
    assert reports[0] == f"pulling {image}"
    assert any(r.startswith(f"pulling {image}: ") and r.endswith("% of 3.0 MB") for r in reports)
    assert reports[-1] == f"pulled {image}"
    assert len(reports) <= 5  # about 1.5 s of pulling, reported at most once a second
    again: list[str] = []
    runtime.prepare(image_plan(image), AUTH, again.append)
    assert again == []  # there now: nothing to pull


def test_wrong_credentials_are_refused_naming_the_image(runtime, registry):
    image = f"{registry.address}/wharf-test/pulled:1"
    with pytest.raises(InstanceError) as caught:
        runtime.prepare(image_plan(image), docker_auth("wharf", "guess"), lambda text: None)
    message = str(caught.value)
    assert image in message and "the registry refused the credentials" in message
    assert "dockerAuth" in message and "guess" not in message


def test_without_dockerauth_and_no_login_on_the_node_the_registry_refuses(
    runtime, registry, tmp_path, monkeypatch
):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-login"))
    image = f"{registry.address}/wharf-test/pulled:1"
    with pytest.raises(InstanceError) as caught:
        runtime.prepare(image_plan(image), None, lambda text: None)
    assert image in str(caught.value) and "the node's docker login" in str(caught.value)


def test_without_dockerauth_the_nodes_docker_login_serves_the_platforms_images_only(
    runtime, registry, client, tmp_path, monkeypatch
):
    """A `docker login` on the node writes config.json; one done after the worker started
    counts too. A workspace's own image gets none of it: the node's login is the platform's
    credential, not a tenant's."""
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"auths": {registry.address: {"auth": AUTH}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    image = f"{registry.address}/wharf-test/pulled:1"
    with pytest.raises(InstanceError) as caught:
        runtime.prepare(image_plan(image), None, lambda text: None, tenant=True)
    assert "the node's own login serves only the platform's images" in str(caught.value)
    runtime.prepare(image_plan(image), None, lambda text: None)
    assert client.images.get(image).id


def test_a_tenants_image_on_the_node_is_pulled_again_with_its_own_credentials(
    runtime, registry, client
):
    """Another workspace pulled the private image onto this node: a workspace without the
    credentials cannot run it from the node's store; one with them pulls nothing new."""
    image = f"{registry.address}/wharf-test/pulled:1"
    runtime.prepare(image_plan(image), AUTH, lambda text: None, tenant=True)
    before = len(registry.requests)
    with pytest.raises(InstanceError) as caught:
        runtime.prepare(image_plan(image), docker_auth("wharf", "guess"), lambda _: None,
                        tenant=True)  # fmt: skip
    assert "refused the credentials" in str(caught.value)
    with pytest.raises(InstanceError):
        runtime.prepare(image_plan(image), None, lambda text: None, tenant=True)
    assert len(registry.requests) > before  # the registry was asked each time
    asked = len(registry.requests)
    runtime.prepare(image_plan(image), AUTH, lambda text: None, tenant=True)
    assert len(registry.requests) > asked
    # The platform's image (tenant=False) on the node: nothing asked.
    asked = len(registry.requests)
    runtime.prepare(image_plan(image), None, lambda text: None)
    assert len(registry.requests) == asked


def test_an_image_built_on_the_node_is_the_operators_and_asks_no_registry(runtime, client):
    local = f"wharf-test/built-here-{uuid.uuid4().hex[:8]}"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("empty"), io.BytesIO(b""))
    client.api.import_image_from_data(archive.getvalue(), repository=local, tag="1")
    try:
        reports: list[str] = []
        runtime.prepare(image_plan(f"{local}:1"), None, reports.append, tenant=True)
        assert reports == []  # no pull: no registry holds it
    finally:
        client.images.remove(f"{local}:1", force=True)


def test_an_image_the_registry_lacks_fails_naming_it(runtime, registry):
    image = f"{registry.address}/wharf-test/absent:1"
    with pytest.raises(InstanceError) as caught:
        runtime.prepare(image_plan(image), AUTH, lambda text: None)
    assert image in str(caught.value) and "no such image" in str(caught.value)


def test_a_registry_that_does_not_answer_is_a_temporary_failure(runtime, registry):
    closed = Registry().start()
    address = closed.address
    closed.stop()  # nothing listens there any more
    image = f"{address}/wharf-test/pulled:1"
    with pytest.raises(PullError) as caught:
        runtime.prepare(image_plan(image), AUTH, lambda text: None)
    assert not isinstance(caught.value, InstanceError) and image in str(caught.value)


# The starter: the spec's current dockerAuth, the progress the service shows


@pytest.fixture
def fleet(store, settings, redis_url):
    from tests.fleet_support import Fleet

    settings.REDIS_URL = redis_url
    return Fleet()


def deploy(spec: dict):
    from django.db import transaction

    from controlplane.services.models import Service
    from controlplane.services.versions import record_version

    with transaction.atomic():
        service = Service.objects.create(
            workspace=default_workspace(), name=spec["name"], spec=spec
        )
        record_version(service, spec, "created")
    return service


def pulling_runtime(node: str, refuse: bool = False):
    from controlplane.services.models import Service
    from tests.fleet_support import FLEET
    from workers.runtimes.memory import MemoryRuntime
    from workers.scheduling.scheduler import schedule

    class PullingRuntime(MemoryRuntime):
        """Pulls the way Docker's runtime does, as far as the starter sees: reports, and
        meanwhile the scheduler shows the service's progress."""

        def __init__(self):
            super().__init__(node=node, address="10.0.0.1")
            self.auths: list[str | None] = []
            self.progress: list[str] = []

        def prepare(self, plan, docker_auth, report, tenant=False) -> None:
            self.auths.append(docker_auth)
            report(f"pulling {plan.image}: 45% of 2.6 GB")
            schedule("private", FLEET)
            self.progress.append(Service.objects.get(name="private").progress)
            if refuse:
                refused = "the registry refused the credentials (the spec's dockerAuth)"
                raise InstanceError(f"could not pull image {plan.image}: {refused}")

    return PullingRuntime()


PRIVATE = {"name": "private", "containers": [{"image": "r.example/private:1", "port": 8000,
           "command": "exec serve"}], "dockerAuth": AUTH}  # fmt: skip


@pytest.mark.django_db
def test_the_starter_pulls_with_the_specs_dockerauth_and_the_service_shows_the_progress(fleet):
    from controlplane.services.models import Service

    fleet.node("a")
    fleet.runtimes["a"] = runtime = pulling_runtime("a")
    deploy(PRIVATE)
    fleet.settle(3)
    assert runtime.auths == [AUTH]
    assert "pulling r.example/private:1: 45% of 2.6 GB" in runtime.progress[0]
    assert fleet.states("private") == [("a", "ready")]
    # A new dockerAuth leaves the instance alone (no new hash) and serves the next pull.
    other = docker_auth("wharf", "rotated")
    changed = {**PRIVATE, "dockerAuth": other, "metadata": {"instance": 2}}
    assert parse_spec(changed).spec_hash() == parse_spec(PRIVATE).spec_hash()
    Service.objects.filter(name="private").update(spec=changed)
    fleet.settle(3)
    assert runtime.auths == [AUTH, other]
    assert fleet.states("private") == [("a", "ready"), ("a", "ready")]


@pytest.mark.django_db
def test_refused_credentials_fail_the_instance_without_the_secret_in_any_event(fleet):
    from controlplane.services.models import Event

    fleet.node("a")
    fleet.runtimes["a"] = pulling_runtime("a", refuse=True)
    deploy(PRIVATE)
    fleet.settle(3)
    assert fleet.states("private") == [("a", "failed")]
    (row,) = fleet.rows("private")
    assert "refused the credentials" in row.message and "r.example/private:1" in row.message
    texts = " ".join(e.message for e in Event.objects.filter(service__name="private"))
    assert "InstanceFailed" in {e.reason for e in Event.objects.filter(service__name="private")}
    assert SECRET not in texts and AUTH not in texts


@pytest.mark.django_db
def test_a_workspaces_image_from_a_local_registry_is_pulled_only_once_granted(
    fleet, registry, runtime
):
    """The registry listens on 127.0.0.1: dockerd would contact it for the tenant. Saved
    past the API (as if the grant was revoked since), the node refuses it before any pull,
    and the registry hears nothing; granted, the real pull goes through."""
    from django.db import transaction

    from controlplane.services.models import Service
    from controlplane.services.versions import record_version
    from tests.api_support import grant
    from workers.runtimes.memory import MemoryRuntime

    class Pulling(MemoryRuntime):
        def prepare(self, plan, docker_auth, report, tenant=False) -> None:
            runtime.prepare(plan, docker_auth, report, tenant)  # the real daemon pulls

    fleet.node("a")
    fleet.runtimes["a"] = Pulling(node="a", address="10.0.0.1")
    local = {**PRIVATE, "containers": [{**PRIVATE["containers"][0],
             "image": f"{registry.address}/wharf-test/pulled:1"}]}  # fmt: skip
    deploy(local)
    asked = len(registry.requests)
    fleet.settle(3)
    assert fleet.states("private") == [("a", "failed")]
    message = fleet.rows("private")[0].message
    assert message.startswith("not granted to its workspace: containers[0].image")
    assert "local address" in message and "grants.registries" in message
    assert len(registry.requests) == asked
    grant(registries=[registry.address])
    with transaction.atomic():
        service = Service.objects.get(name="private")
        Service.objects.filter(pk=service.pk).update(generation=service.generation + 1)
        record_version(service, local, "updated")
    fleet.settle(3)
    assert ("a", "ready") in fleet.states("private")
    assert len(registry.requests) > asked


# dockerAuth through the API


def spec_with(auth) -> dict:
    return {**PRIVATE, "dockerAuth": auth}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad",
    [
        base64.b64encode(SECRET.encode()).decode(),  # no "user:"
        base64.b64encode(f":{SECRET}".encode()).decode(),  # no user
        base64.b64encode(b"wharf:").decode(),  # no password
        f"wharf:{SECRET}",  # not base64
        base64.b64encode(f"wharf:{SECRET}\n".encode()).decode(),  # a control character
        "A" * 8196,  # too long
        REDACTED,  # a masked value, on a new service
        42,
    ],
)
def test_the_api_refuses_a_bad_dockerauth_without_quoting_it(api, bad):
    response = api.post("/api/v1/services", spec_with(bad), format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["dockerAuth"]
    assert SECRET not in response.content.decode()
    if isinstance(bad, str) and len(bad) > 8:
        assert bad not in response.content.decode()


@pytest.mark.django_db
def test_the_api_masks_dockerauth_everywhere_and_keeps_it_on_update(api):
    from controlplane.services.models import Service, ServiceVersion

    def stored() -> str | None:
        return Service.objects.get(name="private").plain_spec().get("dockerAuth")

    preview = api.post("/api/v1/services/preview", PRIVATE, format="json")
    assert preview.status_code == 200 and AUTH not in preview.content.decode()
    created = api.post("/api/v1/services", PRIVATE, format="json")
    assert created.status_code == 201 and created.json()["spec"]["dockerAuth"] == REDACTED
    shown = api.get("/api/v1/services/private").json()["spec"]
    assert shown["dockerAuth"] == REDACTED and stored() == AUTH
    # PUT back as read: the stored credentials stay.
    assert api.put("/api/v1/services/private", shown, format="json").status_code == 200
    assert stored() == AUTH
    # A new value replaces them, without a new spec hash (the running instances stay).
    rotated = docker_auth("wharf", "rotated")
    assert api.put("/api/v1/services/private", spec_with(rotated), format="json").status_code == 200
    assert stored() == rotated
    versions = ServiceVersion.objects.filter(service__name="private")
    assert len({version.spec_hash for version in versions}) == 1
    # Left out: the node's own docker login again.
    without = {k: v for k, v in PRIVATE.items() if k != "dockerAuth"}
    assert api.put("/api/v1/services/private", without, format="json").status_code == 200
    assert stored() is None
    everything = "".join(
        api.get(path).content.decode()
        for path in ("/api/v1/services", "/api/v1/services/private",
                     "/api/v1/services/private/versions", "/api/v1/services/private/versions/1",
                     "/api/v1/services/private/events")
    )  # fmt: skip
    assert AUTH not in everything and rotated not in everything and SECRET not in everything
    assert REDACTED in everything  # the versions that had one say so


def test_docker_placements_carry_the_nodes_npu_smi(runtime, tmp_path, monkeypatch):
    """This machine has no Ascend driver: npu-smi is found on PATH, or nowhere."""
    assert not any(Path(path).exists() for path in NPU_SMI_PATHS)
    (tmp_path / "npu-smi").write_text("#!/bin/sh\n")
    (tmp_path / "npu-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runtime.placement().npu_smi == str(tmp_path / "npu-smi")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert runtime.placement().npu_smi == ""
