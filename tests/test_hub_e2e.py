"""Hub models on the whole system, with a real vLLM CPU engine and a local hub that answers as
Hugging Face Hub does (tests.hub_fake; none is reachable here): a private `hf://` model given
with a token is staged at the commit its branch is on, recorded in the version, and answers
through the gateway; a second instance, started after the branch moved, serves the recorded
commit from the node's copy, downloading nothing; a repository that does not exist and a
gated one with a token refused become events on failed services, not crash loops; the token
is in no log, API answer or engine environment."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.hub_fake import FakeHub
from tests.hub_models import tiny_files
from tests.system import require_runtime, start_system

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
REDIS_DB = 2  # this suite's own
TOKEN = "hf_e2e_secret_a41f9"
REF = "hf://wharf/tiny"


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as fake:
        fake.add_repo("wharf/tiny", tiny_files(), private=True, token=TOKEN)
        fake.add_repo("wharf/gated", tiny_files(), gated=True)
        fake.valid_tokens.add(TOKEN)  # a real token, without access to the gated repository
        yield fake


@pytest.fixture(scope="module")
def system(tmp_path_factory, redis_url, hub):
    require_runtime("process")
    home = tmp_path_factory.mktemp("wharf-hub")
    (home / "models").mkdir()
    system = start_system("process", home, home / "models", redis_url,
                          {"WHARF_HF_ENDPOINT": hub.url}, redis_number=REDIS_DB,
                          database="wharf_hub_process", token_name="hub")  # fmt: skip
    yield system
    system.remove_instances()
    system.stack.stop()


def spec(name: str, model: str, token: str | None = TOKEN, instances: int = 1) -> dict:
    llm = {"engine": "vllm-cpu", "model": model, "served_model_name": "tiny",
           "max_model_len": 512, "max_num_seqs": 4}  # fmt: skip
    return {"name": name, "llm": llm | ({"hub_token": token} if token else {}),
            "metadata": {"instance": instances, "shm_size": 1}}  # fmt: skip


def events(api: httpx.Client, name: str) -> list[dict]:
    return api.get(f"/services/{name}/events").json()


def test_a_private_hub_model_is_staged_once_at_its_versions_commit_and_answers(system, hub):
    first = hub.repos["wharf/tiny"].branches["main"]
    with system.api() as api:
        created = api.post("/services", json=spec("hubbed", REF))
        assert created.status_code == 201, created.text
        service_token = created.json()["token"]
        service = system.wait_phase("hubbed", {"running", "failed"}, timeout=600)
        assert service["phase"] == "running", events(api, "hubbed")
        (version,) = api.get("/services/hubbed/versions").json()
        assert version["hub_commits"] == {REF: first}
        assert any(e["reason"] == "HubModelResolved" and first in e["message"]
                   for e in events(api, "hubbed"))  # fmt: skip
    staged = system.stack.home / "cache" / "hub" / "hf" / "wharf" / "tiny" / first
    assert sorted(p.name for p in staged.iterdir() if not p.name.startswith(".")) == sorted(
        tiny_files())  # fmt: skip
    answer = httpx.post(f"{system.stack.gateway_url}/v1/completions", timeout=60,
                        headers={"Authorization": f"Bearer {service_token}"},
                        json={"model": "tiny", "prompt": "Hello", "max_tokens": 8})  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 8
    downloads = len(hub.downloads())
    assert downloads == len(tiny_files())

    # The branch moves on; a second instance serves the recorded commit from the node's copy.
    hub.commit("wharf/tiny", {**tiny_files(), "config.json": b'{"moved": true}'})
    with system.api() as api:
        scaled = api.put("/services/hubbed", json=spec("hubbed", REF, token="******", instances=2))
        assert scaled.status_code == 200, scaled.text
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            instances = api.get("/services/hubbed/instances").json()
            if [i["state"] for i in instances] == ["ready", "ready"]:
                break
            time.sleep(2)
        assert [i["state"] for i in instances] == ["ready", "ready"], instances
    assert len(hub.downloads()) == downloads  # staged once on this node, reused
    commits = [p.name for p in staged.parent.iterdir() if p.is_dir() and p.name[0] != "."]
    assert commits == [first]  # the moved branch's commit was never staged

    # The token is in no log, API answer or engine environment.
    with system.api() as api:
        shown = [api.get(path).text for path in (
            "/services/hubbed", "/services/hubbed/versions", "/services/hubbed/events",
            "/services/hubbed/instances")]  # fmt: skip
    assert not [text for text in shown if TOKEN in text]
    logs = [p for folder in ("logs", "instances") for p in (system.stack.home / folder).iterdir()
            if p.is_file()]  # fmt: skip
    assert logs and not [p for p in logs if TOKEN in p.read_text(errors="replace")]
    for instance in instances:
        state = json.loads((system.stack.home / "instances" / f"{instance['name']}.json")
                           .read_text())  # fmt: skip
        environ = Path(f"/proc/{state['pid']}/environ").read_bytes()
        assert TOKEN.encode() not in environ and b"HF_TOKEN" not in environ


FAILURES = [  # (service, model, what its InstanceFailed event says)
    ("hub-missing", "hf://wharf/missing", "no such repository"),
    ("hub-gated", "hf://wharf/gated", "needs an access token"),
    ("hub-revision", f"{REF}@v9", "has no revision 'v9'"),
]


def test_what_the_user_must_fix_is_an_event_on_a_failed_service_not_a_crash_loop(system):
    """The three at once: each fails on its own, and two reconcile passes later none was
    retried."""
    with system.api() as api:
        for name, model, _ in FAILURES:
            body = spec(name, model, TOKEN)
            body["llm"]["served_model_name"] = name  # 'tiny' is the first test's: one's own
            assert api.post("/services", json=body).status_code == 201, name
        for name, _, words in FAILURES:
            service = system.wait_phase(name, {"running", "failed"}, timeout=120)
            assert service["phase"] == "failed", name
            failed = [e for e in events(api, name) if e["reason"] == "InstanceFailed"]
            assert len(failed) == 1 and words in failed[0]["message"], events(api, name)
            assert TOKEN not in json.dumps(events(api, name))
        time.sleep(12)  # two reconcile passes later: still failed, never retried
        for name, _, _ in FAILURES:
            (instance,) = api.get(f"/services/{name}/instances").json()
            assert (instance["state"], instance["restarts"]) == ("failed", 0), name
            assert len([e for e in events(api, name) if e["reason"] == "InstanceFailed"]) == 1
            assert not [e for e in events(api, name) if e["reason"] == "InstanceStarted"], name
            assert api.delete(f"/services/{name}").status_code == 202
