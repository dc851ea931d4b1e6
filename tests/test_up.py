"""`make run` (`manage.py up`) when something is in the way: a taken port, a Redis that does not
answer, a part that exits while starting, a stop signal in the middle of the demo's deploy.
Each ends in plain lines and a non-zero exit (or a clean stop), with nothing left running."""

from __future__ import annotations

import secrets
import socket

import pytest

from controlplane.stack import Stack, StartError
from tests.system import free_port
from tests.up_support import Up, leftovers, newcomer_env, wait_gone

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def held_port():
    """A port some other server listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def free_ports() -> dict[str, str]:
    return {"WHARF_API_PORT": str(free_port()), "WHARF_GATEWAY_PORT": str(free_port())}


def assert_refused(up: Up, *expected: str) -> None:
    assert up.finish(60) != 0, up.output
    for text in expected:
        assert text in up.output
    assert "Traceback" not in up.output
    assert not (up.home / "wharf.sqlite3").exists(), "up wrote its database before refusing"
    assert wait_gone(up.home) == []


@pytest.mark.parametrize(
    ("variable", "part"), [("WHARF_API_PORT", "the API and console"),
                           ("WHARF_GATEWAY_PORT", "the gateway")],
)  # fmt: skip
def test_a_taken_port_is_named_with_the_variable_that_moves_it(tmp_path, held_port, variable, part):
    up = Up(newcomer_env(tmp_path, **{**free_ports(), variable: str(held_port)}))
    line = f"port {held_port} ({part}) is already in use; stop what holds it or set {variable}"
    assert_refused(up, line)


def test_a_redis_that_does_not_answer_is_named_and_its_password_not_shown(tmp_path):
    dead = free_port()
    up = Up(
        newcomer_env(tmp_path, **free_ports(), REDIS_URL=f"redis://:hunter2@127.0.0.1:{dead}/0")
    )
    assert_refused(up, f"Redis at REDIS_URL=redis://:******@127.0.0.1:{dead}/0 does not answer")
    assert "hunter2" not in up.output


def test_an_unknown_runtime_is_refused_before_anything_starts(tmp_path):
    env = newcomer_env(tmp_path, **free_ports(), WHARF_RUNTIME="kubernetes")
    assert_refused(Up(env), "WHARF_RUNTIME='kubernetes' is not a runtime; use docker or process")


def test_a_part_that_exits_while_starting_stops_the_others_and_shows_its_log(tmp_path, held_port):
    """The gateway's port is taken after the checks (a race they cannot close): the gateway
    exits, its last log lines are in the error, and the API, worker and Redis are stopped."""
    env = newcomer_env(tmp_path, WHARF_SECRET_KEY=secrets.token_urlsafe(32),
                       DJANGO_SETTINGS_MODULE="controlplane.settings")  # fmt: skip
    stack = Stack(home=tmp_path, env=env, api_port=free_port(), gateway_port=held_port)
    stack.start_redis()
    with pytest.raises(StartError) as failure:
        stack.start()
    assert failure.value.part == "gateway"
    report = failure.value.report()
    assert report.startswith("gateway exited with code")
    assert "address already in use" in report
    assert stack.processes == {} and stack._redis is None
    assert leftovers(tmp_path) == []


def test_sigterm_while_the_demo_deploys_leaves_nothing_running(tmp_path):
    ports = free_ports()
    up = Up(newcomer_env(tmp_path, **ports))
    up.wait_for(r"^==> deploying demo service 'demo'", timeout=240)
    up.wait_for(r"^    (pending|deploying): .+", timeout=60)  # the worker is at it
    assert up.stop() == 0, up.output
    assert "stopped; `make run` brings the services back" in up.output
    assert "Traceback" not in up.output
    held = tuple(int(port) for port in ports.values())
    assert wait_gone(tmp_path, ports=held, services=("demo",)) == []
