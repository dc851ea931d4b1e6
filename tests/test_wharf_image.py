"""Wharf's own image (images/wharf/build.sh) and the compose file that runs it
(deploy/compose/). The image is built by its script and its parts run as containers on the
host's network against this machine's PostgreSQL (a fresh database) and Redis (database 9):
migrations apply, the API answers, the gateway is healthy and the worker registers its node.
Every container started here is removed afterwards, whatever happened."""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from launcher.stack import ROOT
from tests.system import free_port, fresh_database, redis_db, require_runtime

pytestmark = pytest.mark.timeout(900)

BUILD = ROOT / "images" / "wharf" / "build.sh"
COMPOSE = ROOT / "deploy" / "compose"
LABEL = "org.wharf.test"
REDIS_NUMBER = 9  # this suite's own Redis database
# The three keys, as compose hands them over (deploy/compose/compose.yaml): name -> a new value.
KEYS = {
    "secret_key": lambda: secrets.token_urlsafe(48),
    "token_key": lambda: secrets.token_urlsafe(48),
    "secrets_key": lambda: base64.urlsafe_b64encode(os.urandom(32)).decode(),  # a Fernet key
}
IMAGE_USER = 10001  # wharf, the user the API, gateway and migrations run as


def image_tag() -> str:
    with open(ROOT / "pyproject.toml", "rb") as pyproject:
        return f"wharf/wharf:{tomllib.load(pyproject)['project']['version']}"


def needs(what: str) -> None:
    """Skip on a developer machine that lacks it; CI must have it."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing in CI; .ci/run should provide it")
    pytest.skip(f"no {what} here")


@dataclass
class Containers:
    """Containers of the image on the host's network, labelled with this run to be removed."""

    client: Any
    image: str
    env: dict[str, str] = field(default_factory=dict)
    volumes: dict[str, dict[str, str]] = field(default_factory=dict)
    run: str = field(default_factory=lambda: secrets.token_hex(4))

    def start(self, part: str, command: list[str], **options: Any) -> Any:
        env = {**self.env, **options.pop("environment", {})}
        volumes = {**self.volumes, **options.pop("volumes", {})}
        return self.client.containers.run(
            self.image, command, detach=True, network_mode="host", environment=env,
            volumes=volumes, labels={LABEL: self.run}, name=f"wharf-image-test-{self.run}-{part}",
            **options,
        )  # fmt: skip

    def once(self, part: str, command: list[str], **options: Any) -> tuple[int, str]:
        """Run to the end: the exit code and the output."""
        container = self.start(part, command, **options)
        code = container.wait(timeout=180)["StatusCode"]
        return code, container.logs().decode(errors="replace")

    def remove_all(self) -> None:
        for container in self.client.containers.list(
            all=True, filters={"label": f"{LABEL}={self.run}"}
        ):
            container.remove(force=True)


@dataclass
class Deployment:
    containers: Containers
    api_url: str
    gateway_url: str
    token: str
    node: str
    migrate: tuple[int, str]
    parts: dict[str, Any]

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.api_url}/api/v1",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10,
        )


def wait_for(check: Callable[[], Any], container: Any, what: str, timeout: float = 90) -> Any:
    """check()'s first truthy answer; fails with the container's log if it exits or time runs
    out (connection errors count as not yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if answer := check():
                return answer
        except httpx.TransportError:
            pass
        container.reload()
        if container.status == "exited":
            break
        time.sleep(0.5)
    log = container.logs().decode(errors="replace")[-3000:]
    pytest.fail(f"{what} (container {container.status}); its log:\n{log}")


def services_env(tmp_path_factory) -> dict[str, str]:
    """The settings of the README's table, as compose's wharf.env gives them."""
    database, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("WHARF_TEST_REDIS_URL")
    if not database:
        needs("PostgreSQL (DATABASE_URL)")
    if not redis_url or redis_url.startswith("unix://"):
        needs("Redis over TCP (WHARF_TEST_REDIS_URL)")
    import redis

    url = redis_db(redis_url, REDIS_NUMBER)
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return {
        "DATABASE_URL": fresh_database("wharf_lean_image"),
        "REDIS_URL": url,
        **{f"WHARF_{name.upper()}_FILE": f"/run/secrets/wharf_{name}" for name in KEYS},
        "WHARF_RUNTIME": "docker",
        "WHARF_NODE_ADDRESS": "127.0.0.1",
    }


def key_files(tmp_path_factory) -> dict[str, dict[str, str]]:
    """The keys as compose hands them over: files only the image's user reads, as volumes."""
    folder = tmp_path_factory.mktemp("secrets")
    volumes = {}
    for name, make in KEYS.items():
        path = folder / name
        path.write_text(make())
        if os.geteuid() == 0:
            os.chown(path, IMAGE_USER, IMAGE_USER)
            path.chmod(0o600)
        else:
            path.chmod(0o644)
        volumes[str(path)] = {"bind": f"/run/secrets/wharf_{name}", "mode": "ro"}
    return volumes


@pytest.fixture(scope="module")
def image() -> str:
    require_runtime("docker")
    build = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, f"{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    return image_tag()


@pytest.fixture(scope="module")
def deployment(image, tmp_path_factory) -> Iterator[Deployment]:
    import docker

    env = services_env(tmp_path_factory)
    containers = Containers(docker.from_env(), image, env, key_files(tmp_path_factory))
    try:
        migrate = containers.once("migrate", ["migrate"])
        code, token = containers.once(
            "token", ["python", "manage.py", "create_api_token", "--name", "image"]
        )
        assert code == 0, token
        api_port, gateway_port = free_port(), free_port()
        parts = {
            "api": containers.start("api", ["api", "--host", "127.0.0.1", "--port", str(api_port)]),
            "gateway": containers.start(
                "gateway", ["gateway", "--host", "127.0.0.1", "--port", str(gateway_port)]
            ),
        }
        # Root, with dockerd's socket and its home at the host's path (dockerd mounts the
        # model store into engine containers by that path), as compose runs it.
        home = str(tmp_path_factory.mktemp("worker-home"))
        node = f"image-test-{containers.run}"
        parts["worker"] = containers.start(
            "worker", ["worker", "--node", node, "--address", "127.0.0.1"], user="root",
            environment={"WHARF_HOME": home},
            volumes={home: {"bind": home, "mode": "rw"},
                     "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}},
        )  # fmt: skip
        yield Deployment(
            containers, f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{gateway_port}",
            token.strip().splitlines()[-1], node, migrate, parts,
        )  # fmt: skip
    finally:
        containers.remove_all()


def test_migrations_apply_to_a_fresh_database(deployment):
    code, output = deployment.migrate
    assert code == 0, output
    assert "Applying services." in output
    command = ["python", "manage.py", "migrate", "--check"]
    check, output = deployment.containers.once("check", command)
    assert check == 0, f"migrations left unapplied:\n{output}"


def test_the_api_serves_the_spec_schema_to_anyone(deployment):
    def schema() -> dict | None:
        response = httpx.get(f"{deployment.api_url}/api/v1/schema/spec", timeout=5)
        return response.json() if response.status_code == 200 else None

    body = wait_for(schema, deployment.parts["api"], "the API never served its spec schema")
    assert "containers" in body["properties"]


def test_the_api_answers_a_token_and_refuses_its_absence(deployment):
    def services() -> httpx.Response | None:
        with deployment.api() as api:
            response = api.get("/services")
        return response if response.status_code != 502 else None

    response = wait_for(services, deployment.parts["api"], "the API never answered")
    assert response.status_code == 200, response.text
    assert response.json() == []
    assert httpx.get(f"{deployment.api_url}/api/v1/services").status_code == 401


def test_the_gateway_is_healthy(deployment):
    def healthz() -> dict | None:
        response = httpx.get(f"{deployment.gateway_url}/healthz", timeout=5)
        return response.json() if response.status_code == 200 else None

    body = wait_for(healthz, deployment.parts["gateway"], "the gateway never answered /healthz")
    assert body["status"] == "ok"


def test_the_worker_registers_its_node(deployment):
    def node() -> dict | None:
        with deployment.api() as api:
            response = api.get("/nodes")
        if response.status_code != 200:
            return None
        return next((n for n in response.json() if n["name"] == deployment.node), None)

    found = wait_for(node, deployment.parts["worker"], f"node {deployment.node} never registered")
    assert found["address"] == "127.0.0.1"
    assert found["state"] == "ready"


def test_the_image_holds_the_runtime_set_only(image):
    import docker

    containers = Containers(docker.from_env(), image)
    probe = (
        "import importlib.util as u; "
        "print(sorted(m for m in ('pytest', 'playwright', 'ruff', 'mypy', 'hypothesis', 'moto',"
        " 'openai') if u.find_spec(m)))"
    )
    try:
        code, output = containers.once("probe", ["python", "-c", probe])
        assert (code, output.strip()) == (0, "[]")
        code, output = containers.once("cli", ["wharf", "--help"])
        assert code == 0 and "Usage: wharf" in output, output
    finally:
        containers.remove_all()


def test_the_compose_file_is_valid():
    if not shutil.which("docker-compose"):
        needs("docker-compose (apt-get install docker-compose)")
    check = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE / "compose.yaml"), "config", "--services"],
        capture_output=True, text=True, cwd=COMPOSE,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert set(check.stdout.split()) == {"postgres", "redis", "migrate", "api", "gateway", "worker"}


def test_the_compose_redis_asks_for_the_password_wharf_env_gives_every_part():
    """Engines and anything else on the host reach 127.0.0.1:6379: Redis must ask for a
    password, kept out of any command line, and every Wharf part must send it (its use:
    tests/gateway/test_gateway_redis_password.py)."""
    import yaml

    redis_part = yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]["redis"]
    password = redis_part["environment"]["REDIS_PASSWORD"]
    script = redis_part["command"][-1]
    assert "requirepass %s" in script and '"$$REDIS_PASSWORD"' in script
    assert "--requirepass" not in script and password not in script
    assert "REDISCLI_AUTH" in redis_part["healthcheck"]["test"][-1]
    env = dict(line.split("=", 1) for line in (COMPOSE / "wharf.env").read_text().splitlines()
               if line and not line.startswith("#"))  # fmt: skip
    assert env["REDIS_URL"].startswith(f"redis://:{password}@")
    systemd = (ROOT / "deploy/systemd/wharf.env").read_text()
    assert re.search(r"^REDIS_URL=redis://:[^@\s]+@", systemd, re.MULTILINE)
    production = ROOT / "deploy/kubernetes/overlays/production/README.md"
    assert "REDIS_URL=redis://:PASSWORD@" in production.read_text()


def test_the_compose_file_runs_the_image_this_checkout_builds():
    compose = (COMPOSE / "compose.yaml").read_text()
    assert re.findall(r"image: (wharf/\S+)", compose) == [image_tag()]


def test_the_compose_settings_are_the_readmes():
    readme = (ROOT / "README.md").read_text().split("## Configuration", 1)[1]
    documented = set(re.findall(r"`((?:WHARF|DATABASE|REDIS|CELERY)_[A-Z0-9_]+)`", readme))
    lines = (COMPOSE / "wharf.env").read_text().splitlines()
    used = {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}
    assert used and used <= documented, f"not in the README's table: {used - documented}"
