"""LoRA adapters on the whole system, once per runtime, with real vLLM CPU engines: the tiny
model with an adapter from the model store and one staged from S3 (moto), both written by the
project with a non-zero B; through the gateway the base and each adapter answer their own
text; an adapter added through the API is loaded into the running engine (same process or
container, not restarted) and answers; removed, it is OpenAI's 404 model_not_found. The
engine's runtime LoRA routes stay out of callers' reach."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from controlplane.services.tiny_model import write_tiny_lora, write_tiny_model
from tests.moto_support import KEY_ID, SECRET
from tests.system import require_runtime, start_system

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
REDIS_DB = {"process": 7, "docker": 8}  # this suite's own
WHARF = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "wharf"


@pytest.fixture(scope="module", params=["process", "docker"])
def system(request, tmp_path_factory, redis_url, moto):
    runtime = request.param
    require_runtime(runtime)
    home = tmp_path_factory.mktemp(f"wharf-lora-{runtime}")
    models = home / "models"
    write_tiny_model(models / "tiny-llama")
    write_tiny_lora(models / "tiny-sql", seed=1)
    write_tiny_lora(models / "tiny-extra", seed=3)
    storage = {"WHARF_S3_ENDPOINT": moto.url, "WHARF_S3_ACCESS_KEY_ID": KEY_ID,
               "WHARF_S3_ACCESS_KEY_SECRET": SECRET}  # fmt: skip
    system = start_system(runtime, home, models, redis_url, storage,
                          redis_number=REDIS_DB[runtime], database=f"wharf_lora_{runtime}",
                          token_name="lora",
                          grants={"platform_buckets": ["s3://*"]})  # fmt: skip
    yield system
    system.remove_instances()
    system.stack.stop()


def spec(name: str, bucket: str) -> dict:
    adapters = [
        {"name": "sql", "model": "tiny-sql"},
        {"name": "chat", "model": f"s3://{bucket}/chat/"},
    ]
    return {
        "name": name,
        "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "served_model_name": "tiny",
                "max_model_len": 512, "max_num_seqs": 4,
                "lora": {"adapters": adapters, "max_loras": 2, "max_rank": 8}},
        "metadata": {"instance": 1, "shm_size": 1},
    }  # fmt: skip


def complete(system, token: str, model: str) -> httpx.Response:
    body = {"model": model, "prompt": "Hello world, the capital of", "max_tokens": 10,
            "temperature": 0, "ignore_eos": True}  # fmt: skip
    return httpx.post(f"{system.stack.gateway_url}/v1/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {token}"})  # fmt: skip


def text(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["text"]


def engine_identity(system, instance: str) -> str:
    """Its process group (process runtime) or its container and start (Docker)."""
    if system.runtime == "docker":
        import docker

        container = docker.from_env().containers.get(instance)
        return f"{container.id}@{container.attrs['State']['StartedAt']}"
    state = json.loads((system.stack.home / "instances" / f"{instance}.json").read_text())
    return str(state["pid"])


def adapter_states(system, name: str) -> dict[str, list[str]]:
    with system.api() as api:
        listed = api.get(f"/services/{name}/adapters").json()["adapters"]
    return {a["name"]: [i["state"] for i in a["instances"]] for a in listed}


def wharf(system, tmp_path, *args: str) -> str:
    """`wharf ARGS` as a user runs it, signed in by the environment; its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHARF_")}
    env.update(WHARF_API=system.stack.api_url, WHARF_TOKEN=system.admin_token,
               WHARF_CONFIG_DIR=str(tmp_path / "cli"))  # fmt: skip
    done = subprocess.run([str(WHARF), *args], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_for(check, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(1)


def test_adapters_answer_their_own_text_and_change_without_a_restart(system, s3, tmp_path):
    bucket = f"adapters-{system.runtime}"
    s3.create_bucket(Bucket=bucket)
    chat = write_tiny_lora(tmp_path / "chat", seed=2)
    for path in chat.iterdir():
        s3.upload_file(str(path), bucket, f"chat/{path.name}")
    name = f"lora-{system.runtime}"
    with system.api() as api:
        created = api.post("/services", json=spec(name, bucket))
        assert created.status_code == 201, created.text
        token = created.json()["token"]
        service = system.wait_phase(name, {"running", "failed"}, timeout=600)
        assert service["phase"] == "running", api.get(f"/services/{name}/events").json()
        (instance,) = api.get(f"/services/{name}/instances").json()
    engine = engine_identity(system, instance["name"])
    answers = {m: text(complete(system, token, m)) for m in ("tiny", "tiny:sql", "tiny:chat")}
    assert len(set(answers.values())) == 3, answers

    with system.api() as api:  # an adapter added while the engine runs
        added = api.post(
            f"/services/{name}/adapters", json={"name": "extra", "model": "tiny-extra"}
        )
        assert added.status_code == 201, added.text
    wait_for(lambda: adapter_states(system, name).get("extra") == ["loaded"])
    extra = text(complete(system, token, "tiny:extra"))
    assert extra not in answers.values()
    with system.api() as api:
        (now,) = api.get(f"/services/{name}/instances").json()
    assert (now["name"], now["ready_since"], now["restarts"]) == (
        instance["name"], instance["ready_since"], instance["restarts"])  # fmt: skip
    assert engine_identity(system, instance["name"]) == engine  # the same engine, not restarted

    listed = json.loads(wharf(system, tmp_path, "adapters", "list", name, "-o", "json"))
    assert [(a["name"], [i["state"] for i in a["instances"]]) for a in listed] == [
        ("sql", ["loaded"]), ("chat", ["loaded"]), ("extra", ["loaded"])]  # fmt: skip
    # and removed, with the command line
    assert wharf(system, tmp_path, "adapters", "remove", name, "extra") == (
        f"adapter extra removed from {name}\n")  # fmt: skip
    wait_for(lambda: complete(system, token, "tiny:extra").status_code == 404, seconds=15)
    gone = complete(system, token, "tiny:extra").json()["error"]
    assert gone["code"] == "model_not_found"
    with system.api() as api:
        wait_for(lambda: any(e["reason"] == "AdapterUnloaded" for e in
                             api.get(f"/services/{name}/events").json()))  # fmt: skip
    assert text(complete(system, token, "tiny:sql")) == answers["tiny:sql"]
    assert engine_identity(system, instance["name"]) == engine

    # The engine's runtime LoRA routes are the node's alone, however the path is spelled.
    for tail in ("v1/load_lora_adapter", "v1/load%5Flora%5Fadapter", "v1/./unload_lora_adapter",
                 "adapters", "adapters/extra"):  # fmt: skip
        refused = httpx.post(f"{system.stack.gateway_url}/api/predict/{name}/{tail}",
                             json={"lora_name": "x", "lora_path": "/etc"},
                             headers={"Authorization": token}, timeout=10)  # fmt: skip
        assert refused.status_code == 404, (tail, refused.text)
        assert refused.json()["error"]["code"] == "route_not_found"

    with system.api() as api:
        assert api.delete(f"/services/{name}").status_code == 202
    system.wait_phase(name, {"gone"}, timeout=120)
    assert not (system.stack.home / "adapters" / name).exists()  # the node's folder went too
