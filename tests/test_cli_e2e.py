"""`wharf` end to end: the installed console script against a whole stack (API, worker,
gateway, Redis, the database) running vLLM's CPU build as local processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from controlplane.services.tiny_model import write_tiny_model
from tests.system import start_system

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
WHARF = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "wharf"
NAME = "cli-demo"


@pytest.fixture(scope="module")
def system(tmp_path_factory, redis_url):
    models = tmp_path_factory.mktemp("cli-models")
    write_tiny_model(models / "tiny-llama")
    home = tmp_path_factory.mktemp("wharf-cli")
    system = start_system("process", home, models, redis_url, {}, redis_number=4,
                          database="wharf_e2e_cli", token_name="cli")  # fmt: skip
    yield system
    system.remove_instances()  # of services a failed test left behind
    system.stack.stop()


@pytest.fixture(scope="module")
def wharf(system, tmp_path_factory):
    """`wharf ARGS...` as a user runs it: (exit code, stdout, stderr)."""
    config = tmp_path_factory.mktemp("cli-config")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHARF_")}
    env["WHARF_CONFIG_DIR"] = str(config)

    def run(*args: str, token_env: str | None = None, timeout: float = 600):
        extra = {"WHARF_TOKEN": token_env} if token_env else {}
        done = subprocess.run([str(WHARF), *args], env={**env, **extra}, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip
        return done.returncode, done.stdout, done.stderr

    run.config = config  # type: ignore[attr-defined]
    return run


def spec_file(tmp_path: Path, **overrides) -> str:
    spec = {
        "name": NAME,
        "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "served_model_name": "cli-model",
                "max_model_len": 512, "max_num_seqs": 4},
        "metadata": {"instance": 1, "shm_size": 1},
    }  # fmt: skip
    spec.update(overrides)
    path = tmp_path / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_login_keeps_the_token_in_a_private_file(system, wharf):
    code, out, err = wharf("login", "--api", system.stack.api_url, "--token", system.admin_token)
    assert code == 0, err
    path = wharf.config / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["token"] == system.admin_token
    assert wharf("login", "--api", system.stack.api_url, "--token", "wrong")[0] == 3


def test_refusals_have_exit_codes_scripts_can_trust(wharf, tmp_path):
    code, _, err = wharf("create", "-f", spec_file(tmp_path, llm={"engine": "nope"}))
    assert code == 1 and "llm.engine" in err  # the field is named
    assert wharf("desc", "no-such-service")[0] == 4
    assert wharf("describe", "no-such-service")[0] == 4
    assert wharf("services", "list", token_env="not-a-token")[0] == 3
    assert wharf("services", "scale", "x", "--instances", "-1")[0] == 2  # usage


def test_a_service_that_cannot_start_fails_the_wait_with_its_reason(wharf, tmp_path):
    path = spec_file(tmp_path, name="cli-broken", llm={
        "engine": "vllm-cpu", "model": "no-such-model", "max_model_len": 512})  # fmt: skip
    code, _, err = wharf("services", "create", "-f", path, "--wait", "--timeout", "300")
    assert code == 1, err
    assert "service cli-broken failed" in err and "no-such-model" in err
    assert wharf("delete", "cli-broken", "--wait")[0] == 0


def test_the_service_lifecycle(system, wharf, tmp_path):
    metadata = {"instance": 1, "shm_size": 1, "workspace_id": "ws-1"}  # EAS's, cloud-only
    spec = spec_file(tmp_path, labels={"team": "cli"}, metadata=metadata)
    code, out, err = wharf("services", "create", "-f", spec, "--wait")
    assert code == 0, err
    assert "running: 1/1 ready" in err  # the progress shown while it started
    assert "warning: metadata.workspace_id: no effect here" in err
    assert "token:" in out and "model=cli-model" in out

    code, out, _ = wharf("list", "-o", "json")
    assert code == 0
    (listed,) = [s for s in json.loads(out) if s["name"] == NAME]
    assert listed["phase"] == "running" and listed["ready_instances"] == 1
    for label, found in (("team=cli", [NAME]), ("team=other", [])):
        code, out, _ = wharf("services", "list", "--label", label, "-o", "json")
        assert code == 0 and [s["name"] for s in json.loads(out)] == found

    for verb in (["desc"], ["describe"], ["services", "describe"]):  # eascmd's, kubectl's
        code, out, _ = wharf(*verb, NAME)
        assert code == 0 and "instances:" in out and "ready" in out, verb

    code, out, _ = wharf("services", "logs", NAME, "--tail", "500")
    assert code == 0 and "vllm" in out.lower()

    code, out, err = wharf("call", NAME, "--prompt", "Hello", "--max-tokens", "4", "-o", "json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["model"] == "cli-model" and answer["usage"]["prompt_tokens"] > 0
    code, out, err = wharf("call", NAME, "--prompt", "Hello", "--max-tokens", "4", "--stream")
    assert code == 0 and out.endswith("\n"), err

    code, out, err = wharf("services", "scale", NAME, "--instances", "2", "--wait", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["ready_instances"] == 2

    code, out, _ = wharf("services", "versions", NAME, "-o", "json")
    assert [v["number"] for v in json.loads(out)] == [2, 1]
    code, out, _ = wharf("services", "events", NAME, "-o", "json")
    assert {"Created", "Updated"} <= {e["reason"] for e in json.loads(out)}

    code, out, err = wharf("services", "rollback", NAME, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["version"] == 3

    code, out, _ = wharf("services", "token", "rotate", NAME, "-o", "json")
    assert code == 0 and json.loads(out)["token"]
    code, out, err = wharf("call", NAME, "--prompt", "Hi", "--max-tokens", "2")
    assert code == 0, err  # the new token was kept and is the one used

    code, out, err = wharf("delete", NAME, "--wait")
    assert code == 0 and "deleted" in out, err
    assert wharf("desc", NAME)[0] == 4
    deadline = time.monotonic() + 30  # as test_system: the node stops them just after
    while system.instances().list(service=NAME) and time.monotonic() < deadline:
        time.sleep(1)
    assert system.instances().list(service=NAME) == []  # nothing left running


def test_workspaces_members_quotas_and_the_audit(wharf, tmp_path):
    code, out, err = wharf("workspaces", "list")
    assert code == 0 and out.split("\n")[1].split()[:2] == ["default", "owner"], err
    code, out, _ = wharf("members", "list", "default", "-o", "json")
    assert {"user": "admin", "role": "owner"}.items() <= json.loads(out)[0].items()
    code, out, err = wharf("workspaces", "quota", "default", "--services", "50", "-o", "json")
    assert code == 0 and json.loads(out)["quotas"]["services"] == 50, err
    code, _, err = wharf("members", "add", "default", "nobody", "--role", "viewer")
    assert code == 1 and "no such user" in err
    code, out, _ = wharf("audit", "--since", "1h", "-o", "json")
    entries = json.loads(out)
    assert entries[0]["action"] == "PATCH /api/v1/workspaces/default"  # the quota, just now
    assert {e["actor"] for e in entries if e["via"].startswith("token")} == {"admin"}
    assert entries[-1]["via"] == "command create_api_token"  # the stack's admin token, first
