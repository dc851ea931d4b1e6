"""`eascmd` end to end: the installed console script, driven as a user drives Alibaba's, against
a whole stack (API, worker, gateway, Redis, the database) running a published EAS file's
service as local processes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.system import start_system

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]
EASCMD = ROOT / ".venv" / "bin" / "eascmd"
CORPUS = ROOT / "tests" / "eas_corpus" / "02-json-deploy-quickstart-2026.json"
NAME = "eascmd-demo"
REDIS_DB = 13  # this suite's own (15 is the tests' shared one)
SCRIPT = "exec python3 -m http.server $PORT"  # the process runtime says which port


@pytest.fixture(scope="module")
def system(tmp_path_factory, redis_url):
    home = tmp_path_factory.mktemp("eascmd")
    system = start_system("process", home, home / "models", redis_url, {},
                          redis_number=REDIS_DB, database="wharf_e2e_eascmd",
                          token_name="eascmd", grants={"process_code": True})  # fmt: skip
    yield system
    system.remove_instances()  # of services a failed test left behind
    system.stack.stop()


@pytest.fixture(scope="module")
def eascmd(tmp_path_factory):
    """`eascmd ARGS...` as a user runs it: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHARF_")}
    env["EASCMD_CONFIG_DIR"] = str(tmp_path_factory.mktemp("eas-config"))

    def run(*args: str, answer: str = ""):
        done = subprocess.run([str(EASCMD), *args], env=env, input=answer, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        return done.returncode, done.stdout, done.stderr

    return run


def eas_file(tmp_path: Path) -> str:
    """EAS's published quick-start file, its script one this machine runs."""
    spec = json.loads(CORPUS.read_text())
    spec["metadata"]["name"] = NAME
    spec["containers"][0]["script"] = SCRIPT
    # Its instance type (ecs.c7a.large) would reserve 2 CPUs each: two fit a 2-CPU machine at 1.
    spec["metadata"]["cpu"] = 1
    path = tmp_path / "service.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_eascmd_drives_a_service_through_its_life(system, eascmd, tmp_path):
    token = system.admin_token
    address = system.stack.api_url.removeprefix("http://")
    code, out, _ = eascmd("config", "-i", "ops", "-k", token, "-e", address)
    assert code == 0 and token not in out

    code, out, err = eascmd("create", eas_file(tmp_path), "--timeout", "60")
    assert code == 0, out + err
    assert "[WARNING] metadata.workspace_id" in err and "[WARNING] cloud" in err
    assert "Internet Endpoint" in out and f"/api/predict/{NAME}" in out
    assert out.rstrip().endswith("[OK] Service is running")

    code, out, _ = eascmd("ls")
    assert code == 0 and "SERVICENAME" in out and "SERVICEPATH" in out
    (row,) = [line for line in out.splitlines() if f"| {NAME} " in line]
    assert "| default " in row and "| Running " in row

    code, out, _ = eascmd("desc", NAME)
    assert code == 0 and "| AccessToken " in out and "******" in out
    assert "| TotalInstance   | 1" in out and "python3 -m http.server" in out

    code, out, err = eascmd("modify", NAME, "-Dmetadata.instance=2", "--timeout", "60")
    assert code == 0, out + err
    assert "Running: 2]" in out and "[OK] Service is running" in out
    code, out, _ = eascmd("w", NAME)
    assert code == 0 and "INSTANCENAME" in out and out.count("[1/1]") == 2
    first = out.splitlines()[3].split("|")[1].strip()
    code, out, err = eascmd("dw", NAME, first, "-y")  # one of two: it drains, another replaces it
    assert code == 0, out + err
    assert f"[OK] Instance(s) [{first}] for service [{NAME}]" in out
    code, out, _ = eascmd("w", NAME)
    assert code == 0 and out.count("[1/1]") == 2 and f"| {first} " not in out

    change = tmp_path / "change.json"
    change.write_text(json.dumps({"metadata": {"instance": 1}, "labels": {"team": "eas"}}))
    code, out, err = eascmd("modify", NAME, "-s", str(change), "--timeout", "60")
    assert code == 0, out + err
    with system.api() as api:
        spec = api.get(f"/services/{NAME}", params={"format": "eas"}).json()
    assert spec["metadata"]["instance"] == 1 and spec["labels"] == {"team": "eas"}
    assert spec["containers"][0]["script"] == SCRIPT  # merged, not replaced

    code, out, err = eascmd("stop", NAME, "--timeout", "60")
    assert code == 0 and "[OK] Service is stopped" in out, out + err
    code, out, err = eascmd("start", NAME, "--timeout", "60")
    assert code == 0 and "[OK] Service is running" in out, out + err

    code, out, err = eascmd("version", NAME, "2", "--timeout", "60")  # the two-instance spec
    assert code == 0 and "now version 4" in out, out + err
    code, out, _ = eascmd("desc", NAME)
    assert "| TotalInstance   | 2" in out and "| CurrentVersion  | 4" in out

    code, out, err = eascmd("delete", NAME, answer="n\n")
    assert code == 1 and f"Are you sure to delete the service [{NAME}] in [default]? [Y/n]" in out
    code, out, err = eascmd("delete", NAME, "-y", "--timeout", "60")
    assert code == 0 and "[OK] Service was deleted successfully" in out, out + err
    assert eascmd("desc", NAME)[0] == 4
    assert eascmd("-k", "not-a-token", "ls")[0] == 3
