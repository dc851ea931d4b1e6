"""EAS's containers[].prepare: the spec's bounds and checks on pip requirements, the plan that
installs them before the command (on every runtime: the plan's arguments), and real local
process instances that pip-install a wheel built here (no network: a file path) and import it,
or fail with pip's own last lines."""

from __future__ import annotations

import base64
import hashlib
import time
import tomllib
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from contracts.engines import prepare, render
from contracts.engines.plan import Placement
from contracts.kube.manifests import Owner
from contracts.kube.manifests import render as kube_render
from contracts.kube.names import KubeSettings
from contracts.spec import SpecError, parse_spec
from contracts.spec_facts import replicas
from controlplane.nodes.models import Node
from controlplane.services.models import Instance, Service
from controlplane.services.versions import record_version
from tests.api_support import default_workspace, grant
from tests.fleet_support import FLEET
from tests.system import require_runtime
from workers.nodes.agent import converge
from workers.nodes.starter import start_instance
from workers.runtimes.base import InstanceRequest
from workers.runtimes.process import ProcessRuntime
from workers.scheduling.scheduler import schedule

PACKAGE = "wharfprobe"
PREPARE = "containers[0].prepare"
WHARF_VERSION = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())[
    "project"
]["version"]


def spec(prepare_section: dict | None, command: str = "serve", env: dict | None = None) -> dict:
    container = {"image": "python:3.11", "command": command, "port": 8000,
                 "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}  # fmt: skip
    if prepare_section is not None:
        container["prepare"] = prepare_section
    return {"name": "prepared", "containers": [container]}


def errors_of(prepare_section: dict) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as refused:
        parse_spec(spec(prepare_section))
    return refused.value.errors


@pytest.mark.parametrize(
    "requirement",
    ["numpy==1.16.4", "absl-py==0.11.0", 'pkg[extra]>=1; python_version < "3.12"',
     "pkg @ file:///wheels/pkg-1.0-py3-none-any.whl", "/wheels/pkg-1.0-py3-none-any.whl",
     "https://example.com/pkg-1.0.tar.gz"],
)  # fmt: skip
def test_a_pip_requirement_is_taken(requirement: str) -> None:
    parsed = parse_spec(spec({"pythonRequirements": [requirement]}))
    assert parsed.containers[0].prepare.pythonRequirements == [requirement]


@pytest.mark.parametrize(
    ("requirement", "why"),
    [
        ("--index-url=https://evil.example/simple", "not a pip option"),
        ("-r /etc/passwd", "not a pip option"),
        ("numpy; rm -rf /", "is not a pip requirement"),
        ("numpy$(id)", "is not a pip requirement"),
        ("`id`", "is not a pip requirement"),
        ("numpy 1.0", "is not a pip requirement"),
        ("numpy\n--index-url=x", "printable characters"),
        ("", "printable characters"),
        ("x" * 1025, "at most 1024 characters"),
    ],
)
def test_a_requirement_that_is_not_one_is_refused_by_name(requirement: str, why: str) -> None:
    errors = errors_of({"pythonRequirements": [requirement]})
    assert list(errors) == ["containers[0].prepare.pythonRequirements[0]"]
    assert why in errors["containers[0].prepare.pythonRequirements[0]"][0]


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"pythonRequirements": ["a"] * 257}, f"{PREPARE}.pythonRequirements"),
        ({"pythonRequirementsPath": "requirements.txt"}, f"{PREPARE}.pythonRequirementsPath"),
        ({"pythonRequirementsPath": "/app/../etc/r.txt"}, f"{PREPARE}.pythonRequirementsPath"),
        ({"pythonRequirementsPath": "/app/r.txt; id"}, f"{PREPARE}.pythonRequirementsPath"),
        ({}, PREPARE),
        ({"pythonRequirements": []}, PREPARE),
        ({"pythonRequirement": ["a"]}, f"{PREPARE}.pythonRequirement"),
    ],
)  # fmt: skip
def test_bounds_paths_and_an_empty_prepare_are_refused_by_name(section: dict, field: str) -> None:
    assert field in errors_of(section)


def test_prepare_leaves_earlier_spec_hashes_alone_and_changes_the_hash_when_set() -> None:
    plain = parse_spec(spec(None))
    assert plain.spec_hash() == "943ac501d03d"  # as before prepare existed: nothing restarts
    prepared = parse_spec(spec({"pythonRequirements": ["numpy==1.26.4"]}))
    assert prepared.spec_hash() != plain.spec_hash()


def test_the_plan_installs_first_with_each_requirement_an_argument_of_its_own() -> None:
    requirement = 'pkg>=1; python_version < "4"'
    parsed = parse_spec(spec({"pythonRequirements": [requirement],
                              "pythonRequirementsPath": "/app/requirements.txt"},
                             command="python app.py --name 'a b'"))  # fmt: skip
    args = render(parsed, Placement()).args
    assert args[:4] == ["/bin/sh", "-c", prepare.PREPARE_SCRIPT, "wharf-prepare"]
    assert args[4:] == ["/bin/sh -c 'python app.py --name '\"'\"'a b'\"'\"''",
                        "/app/requirements.txt", requirement]  # fmt: skip
    assert render(parse_spec(spec(None)), Placement()).args == ["/bin/sh", "-c", "serve"]
    assert f"exit {prepare.PREPARE_FAILED}" in prepare.PREPARE_SCRIPT
    assert prepare.FAILED_LINE in prepare.PREPARE_SCRIPT.replace("$failed", prepare.FAILED_LINE)
    assert f"${prepare.TARGET_ENV}" in prepare.PREPARE_SCRIPT


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"pythonRequirements": ["a", "b", "c"]},
         "installing 3 Python requirements before its command starts"),
        ({"pythonRequirements": ["a"]},
         "installing 1 Python requirement before its command starts"),
        ({"pythonRequirementsPath": "/app/r.txt"},
         "installing the Python requirements of /app/r.txt before its command starts"),
        ({"pythonRequirements": ["a", "b"], "pythonRequirementsPath": "/app/r.txt"},
         "installing 2 Python requirements and /app/r.txt before its command starts"),
    ],
)  # fmt: skip
def test_the_instances_message_says_what_installs(section: dict, message: str) -> None:
    assert prepare.progress(parse_spec(spec(section))) == message
    assert prepare.progress(parse_spec(spec(None))) == ""


def test_a_failure_is_pips_last_lines_in_one_line() -> None:
    tail = ("wharf: installing 1 Python requirement(s)\nLooking in links: /x\n"
            "ERROR: Could not find a version that satisfies the requirement nothere==1\n\n"
            "ERROR: No matching distribution found for nothere==1\n"
            f"{prepare.FAILED_LINE} (pip exited 1)\n")  # fmt: skip
    assert prepare.failure(tail, lines=2) == (
        "installing the Python requirements failed: ERROR: Could not find a version that "
        "satisfies the requirement nothere==1 / ERROR: No matching distribution found for "
        "nothere==1"
    )
    assert prepare.failure("") == "installing the Python requirements failed"
    assert len(prepare.failure(("E" * 300 + "\n") * 4 + prepare.FAILED_LINE)) == 600


def test_on_kubernetes_the_pods_command_is_the_same_install() -> None:
    parsed = parse_spec(spec({"pythonRequirements": ["numpy==1.26.4"]}, command="echo $HOME"))
    counts = replicas(parsed)
    objects = kube_render(
        parsed.name, parsed, 1, counts, KubeSettings(namespace="llm"),
        Owner("svc", "6f1c8a54-0000-4000-8000-000000000001"), {"": "engine-key-value-7c1d"},
    )  # fmt: skip
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    assert engine["command"] == ["/bin/sh"]
    # The kubelet expands $(NAME) and $$: the script's and the command's $ reach sh as written.
    assert engine["args"][:3] == ["-c", prepare.PREPARE_SCRIPT.replace("$", "$$"), "wharf-prepare"]
    assert engine["args"][3:] == ["/bin/sh -c 'echo $$HOME'", "", "numpy==1.26.4"]


# Real local process instances.


def build_wheel(folder: Path, value: str) -> Path:
    """A pure-Python wheel of PACKAGE, written by hand (no build backend, no network)."""
    files = {
        f"{PACKAGE}/__init__.py": f"VALUE = {value!r}\n",
        f"{PACKAGE}-1.0.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n"
        ),
        f"{PACKAGE}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: wharf-test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }  # fmt: skip
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{PACKAGE}-1.0.dist-info/RECORD,,")
    files[f"{PACKAGE}-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{PACKAGE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    yield runtime
    for instance in runtime.list():
        runtime.remove(instance.name)


def run_until_exit(runtime: ProcessRuntime, name: str, data: dict, seconds: float = 90):
    plan = render(parse_spec(data), Placement(in_container=False, port=18555))
    runtime.create(InstanceRequest("prepared", name, "h", plan))
    deadline = time.monotonic() + seconds
    while True:
        (observed,) = [o for o in runtime.list() if o.name == name]
        if not observed.running or time.monotonic() > deadline:
            return observed
        time.sleep(0.2)


IMPORTS = f"python3 -c 'import {PACKAGE}; print(\"got:\", {PACKAGE}.VALUE)'"
# No index: the install reads the wheel's path alone, and a missing package fails at once.
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}


def test_a_process_instance_imports_what_its_requirements_installed(runtime, tmp_path):
    wheel = build_wheel(tmp_path, "installed by prepare")
    listed = tmp_path / "requirements.txt"
    listed.write_text(f"{wheel}\n")
    command = IMPORTS + ' && echo "home=$HOME"'
    for name, section in (
        ("prepared-list", {"pythonRequirements": [str(wheel)]}),
        ("prepared-file", {"pythonRequirementsPath": str(listed)}),
    ):
        observed = run_until_exit(runtime, name, spec(section, command, env=OFFLINE))
        logs = runtime.logs(name)
        assert observed.exit_code == 0, logs
        assert "wharf: installing" in logs and "got: installed by prepare" in logs
        assert f"home={Path.home()}" in logs  # the command is still a shell line, as written
        assert (runtime.state_dir / "python" / name / PACKAGE).is_dir()  # its own folder
        runtime.remove(name)
        assert not (runtime.state_dir / "python" / name).exists()


def test_a_failed_install_is_the_instances_error_with_pips_last_lines(runtime, tmp_path):
    marker = tmp_path / "ran"
    data = spec({"pythonRequirements": ["wharf-nowhere-to-be-found==1.0"]},
                command=f"touch {marker}", env=OFFLINE)  # fmt: skip
    observed = run_until_exit(runtime, "prepared-fails", data)
    assert observed.exit_code == prepare.PREPARE_FAILED
    assert not marker.exists()  # the command never started
    reason = prepare.failure(runtime.logs("prepared-fails", tail=15))
    assert reason.startswith("installing the Python requirements failed: ")
    assert "wharf-nowhere-to-be-found" in reason


# The node's worker: what the instance's message says while it installs, and when it fails.


@pytest.fixture
def node(runtime, store, settings, redis_url, tmp_path):
    """A node with the process runtime; its workspace may run commands there (process_code)."""
    settings.REDIS_URL = redis_url
    settings.WHARF_INSTANCE_LOG_DIR = tmp_path / "logs"
    grant(process_code=True)
    Node.objects.create(name="local", address="127.0.0.1", heartbeat_at=timezone.now())
    return runtime


def deploy(data: dict) -> Service:
    with transaction.atomic():
        service = Service.objects.create(workspace=default_workspace(), name=data["name"],
                                         spec=data)  # fmt: skip
        record_version(service, data, "created")
    return service


def worker_pass(runtime: ProcessRuntime, service: str) -> Instance:
    """One scheduler pass and one pass of the node's agent; the service's one instance."""
    schedule(service, FLEET)
    converge("local", runtime, FLEET, lambda name: start_instance(name, "local", runtime, FLEET),
             check=lambda *args: False)  # fmt: skip
    (row,) = Instance.objects.filter(service__name=service)
    return row


@pytest.mark.django_db
def test_the_worker_shows_the_install_then_pips_reason_for_a_failure(node, tmp_path):
    wheel = build_wheel(tmp_path, "v")
    data = spec({"pythonRequirements": [str(wheel)]}, "exec sleep 30", env=OFFLINE)
    deploy({**data, "name": "installs"})
    row = worker_pass(node, "installs")
    assert row.state == "starting", row.message
    assert row.message == "installing 1 Python requirement before its command starts"
    data = spec({"pythonRequirements": ["wharf-nowhere-to-be-found==1.0"]}, "true", env=OFFLINE)
    service = deploy({**data, "name": "fails"})
    assert worker_pass(node, "fails").state == "starting"
    deadline = time.monotonic() + 60
    while (row := worker_pass(node, "fails")).state == "starting":
        assert time.monotonic() < deadline, node.logs(row.name)
        time.sleep(0.3)
    assert row.state == "backoff"
    assert row.message.startswith("installing the Python requirements failed: ")
    assert "No matching distribution found for wharf-nowhere-to-be-found==1.0" in row.message
    assert service.events.filter(reason="InstanceExited", message__contains="ERROR:").exists()


def test_a_docker_instance_of_the_wharf_image_imports_what_it_installed(tmp_path):
    """wharf/wharf:<version> brings python and pip (in a virtualenv it may not write: it runs
    as a plain user); the wheel is in the image, as a user's image would carry it."""
    require_runtime("docker")
    from workers.runtimes.docker import DockerRuntime

    runtime = DockerRuntime(str(tmp_path / "models"), files_dir=tmp_path / "files")
    wharf_image = f"wharf/wharf:{WHARF_VERSION}"
    if not runtime.client.images.list(name=wharf_image):
        pytest.skip(f"{wharf_image} is not built here (make image)")
    build_wheel(tmp_path, "installed in a container")
    (tmp_path / "Dockerfile").write_text(f"FROM {wharf_image}\nCOPY *.whl /wheels/\n")
    image = f"eas-webapp/prepare-test:{uuid.uuid4().hex[:8]}"
    runtime.client.images.build(path=str(tmp_path), tag=image, rm=True)
    wheel = f"/wheels/{PACKAGE}-1.0-py3-none-any.whl"
    data = spec({"pythonRequirements": [wheel]}, IMPORTS, env=OFFLINE)
    data["containers"][0]["image"] = image
    name = f"prepared-{uuid.uuid4().hex[:8]}-1"
    try:
        runtime.create(InstanceRequest(name.removesuffix("-1"), name, "h",
                                       render(parse_spec(data), runtime.placement())))  # fmt: skip
        code = runtime.client.containers.get(name).wait(timeout=120)["StatusCode"]
        logs = runtime.logs(name, tail=100)
    finally:
        runtime.remove(name)
        runtime.client.images.remove(image, force=True)
    assert code == 0, logs
    assert "got: installed in a container" in logs
    assert "Successfully installed wharfprobe-1.0" in logs
