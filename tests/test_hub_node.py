"""Hub models on a node (real database, a local fake hub the official client talks to): the
first staging of a version resolves its revision and records the commit in the version; later
stagings, on this node or another, serve that commit; an update keeps it; what the user must
fix (no such repository, no access, no such revision) is an InstanceError naming it, what may
pass (the hub down) is HubUnreachable; the token is in no message, event or API answer."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.services.models import Event, Instance, Service, ServiceVersion
from controlplane.services.tiny_model import write_tiny_lora
from tests.api_support import client_for
from tests.hub_fake import FakeHub
from tests.hub_models import tiny_files
from workers.models import adapters, hub, provisioning
from workers.models.hub_pins import VersionPins
from workers.nodes import node
from workers.runtimes.base import InstanceError
from workers.scheduling import scheduler

pytestmark = pytest.mark.django_db
TOKEN = "hf_node_secret_5d1e"
REF = "hf://wharf/tiny"


@pytest.fixture
def fake(settings, monkeypatch) -> Iterator[FakeHub]:
    monkeypatch.setattr(hub, "RETRY_DELAY", 0.0)
    with FakeHub() as fake:
        settings.WHARF_HF_ENDPOINT = settings.WHARF_MODELSCOPE_ENDPOINT = fake.url
        fake.add_repo("wharf/tiny", tiny_files(), private=True, token=TOKEN)
        yield fake


def deploy(model: str = REF, token: str | None = TOKEN, name: str = "hubbed") -> Service:
    llm = {"engine": "vllm-cpu", "model": model} | ({"hub_token": token} if token else {})
    created = client_for(f"dev-{name}").post(
        "/api/v1/services", {"name": name, "metadata": {"instance": 1}, "llm": llm}, format="json"
    )
    assert created.status_code == 201, created.content
    return Service.objects.get(name=name)


def stage(service: Service, cache: Path, reports: list[str] | None = None) -> Path:
    spec = service.parsed_spec()
    pins = VersionPins(service, spec.spec_hash())
    report = reports.append if reports is not None else (lambda _: None)
    return Path(provisioning.stage_models(spec, cache, report, pins)[spec.llm.model])


def test_a_revision_is_resolved_once_recorded_in_its_version_and_served_everywhere(fake, tmp_path):
    service = deploy()
    first = fake.repos["wharf/tiny"].branches["main"]
    reports: list[str] = []
    folder = stage(service, tmp_path / "node-a", reports)
    assert folder.name == first and json.loads((folder / "config.json").read_text())
    assert ServiceVersion.objects.get(service=service).hub_commits == {REF: first}
    resolved = Event.objects.get(service=service, reason="HubModelResolved")
    assert first in resolved.message and "version 1" in resolved.message
    assert reports[:2] == [f"resolving {REF}", f"staging {REF}"]
    assert reports[-1] == f"staging {REF}: 2.8 MB of 2.8 MB (100%)"  # bytes done of total
    fetched = len(fake.downloads())
    assert fetched == len(tiny_files())

    # The branch moves on; this node reuses its copy, another node stages the recorded commit.
    fake.commit("wharf/tiny", {**tiny_files(), "config.json": b"{}"})
    assert stage(service, tmp_path / "node-a") == folder
    assert len(fake.downloads()) == fetched  # staged once per node, reused
    other = stage(service, tmp_path / "node-b")
    assert (
        other.name == first and (other / "config.json").read_bytes() == tiny_files()["config.json"]
    )

    # An update keeps the commit while it names the same model, and the API shows it.
    api = client_for("updater")
    spec = api.get("/api/v1/services/hubbed").json()["spec"]
    spec["llm"]["max_model_len"] = 256
    assert api.put("/api/v1/services/hubbed", spec, format="json").status_code == 200
    versions = api.get("/api/v1/services/hubbed/versions").json()
    listed = versions["results"] if isinstance(versions, dict) else versions
    assert [v["hub_commits"] for v in listed] == [{REF: first}, {REF: first}]
    assert TOKEN not in json.dumps(versions)
    service.refresh_from_db()
    assert stage(service, tmp_path / "node-a").name == first


def test_two_nodes_resolving_at_once_serve_the_first_ones_commit(fake):
    service = deploy()
    pins = VersionPins(service, service.parsed_spec().spec_hash())
    assert pins.record(REF, "a" * 40) == "a" * 40
    assert pins.record(REF, "b" * 40) == "a" * 40  # the second finds the first's
    assert pins.recorded(REF) == "a" * 40


CASES = [
    ("no such repository", "hf://wharf/missing", TOKEN, hub.HubError, "no such repository"),
    ("no token for a private one", REF, None, hub.HubError, "no such repository"),
    ("a wrong token", REF, "hf_wrong_token_0000", hub.HubError, ""),
    ("no such revision", f"{REF}@v9", TOKEN, hub.HubError, "has no revision 'v9'"),
]


@pytest.mark.parametrize(("case", "model", "token", "kind", "words"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_what_the_user_must_fix_is_an_instance_error_naming_it(fake, tmp_path, case, model,
                                                               token, kind, words):  # fmt: skip
    service = deploy(model, token)
    with pytest.raises(InstanceError) as failed:
        stage(service, tmp_path)
    assert words in str(failed.value) and "wharf/" in str(failed.value)
    assert TOKEN not in str(failed.value) and "hf_wrong_token" not in str(failed.value)
    assert not ServiceVersion.objects.get(service=service).hub_commits


def test_a_hub_that_is_down_may_pass_and_is_not_the_users_to_fix(fake, settings, tmp_path):
    service = deploy()
    settings.WHARF_HF_ENDPOINT = "http://127.0.0.1:9"  # nothing listens there
    with pytest.raises(hub.HubUnreachable) as down:
        stage(service, tmp_path)
    assert "127.0.0.1:9" in str(down.value) and TOKEN not in str(down.value)


def test_placement_prefers_a_node_that_holds_the_repository(fake, settings, tmp_path):
    settings.WHARF_CACHE_DIR, settings.WHARF_MODEL_DIR = tmp_path / "cache", tmp_path / "models"
    service = deploy(f"{REF}@main")
    assert REF not in node.local_models()
    stage(service, settings.WHARF_CACHE_DIR)
    assert REF in node.local_models()  # what the node's inventory reports
    assert scheduler._model_key(service.parsed_spec()) == REF  # what placement looks for


def test_a_draft_and_adapters_from_a_hub_are_staged_with_the_model(fake, settings, tmp_path):
    settings.WHARF_CACHE_DIR = tmp_path / "cache"
    with tempfile.TemporaryDirectory() as scratch:
        lora = write_tiny_lora(Path(scratch) / "sql", seed=1)
        fake.add_repo("wharf/sql-lora", {p.name: p.read_bytes() for p in lora.iterdir()},
                      private=True, token=TOKEN)  # fmt: skip
    api = client_for("dev-lora")
    llm = {"engine": "vllm-cpu", "model": REF, "hub_token": TOKEN,
           "speculative": {"model": REF, "num_speculative_tokens": 2},
           "lora": {"adapters": [{"name": "sql", "model": "hf://wharf/sql-lora"}]}}  # fmt: skip
    spec = {"name": "lora-hub", "metadata": {"instance": 1}, "llm": llm}
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    service = Service.objects.get(name="lora-hub")
    parsed = service.parsed_spec()
    pins = VersionPins(service, parsed.spec_hash())
    staged = provisioning.stage_models(parsed, settings.WHARF_CACHE_DIR, lambda _: None, pins)
    assert sorted(staged) == ["hf://wharf/sql-lora", REF]  # the draft is the model: once
    assert (Path(staged["hf://wharf/sql-lora"]) / "adapter_config.json").is_file()
    # An adapter added while the engine runs is staged by the node's sync the same way.
    row = Instance(service=service, spec_hash=parsed.spec_hash())
    fetch = adapters._fetcher(row, parsed)
    assert fetch("hf://wharf/sql-lora") == Path(staged["hf://wharf/sql-lora"])
    with pytest.raises(adapters.AdapterError, match="no such repository"):
        fetch("hf://wharf/no-such-lora")


def test_another_workspace_needs_its_own_access_to_a_staged_private_commit(
    fake, settings, tmp_path
):
    """Workspace A staged the private repository with its token; workspace B names the same
    commit with no token, or a wrong one: the node asks the hub for B before it serves the
    folder, and refuses. With the hub down, A keeps its copy and B waits."""
    cache = tmp_path / "cache"
    commit = stage(deploy(), cache).name
    pinned = f"{REF}@{commit}"

    def in_team_b(name: str, token: str | None, workspace: str = "team-b") -> Service:
        llm = {"engine": "vllm-cpu", "model": pinned} | ({"hub_token": token} if token else {})
        client = client_for(f"b-{name}", workspace=workspace)
        created = client.post("/api/v1/services", {"name": name, "llm": llm}, format="json")
        assert created.status_code == 201, created.content
        return Service.objects.get(name=name)

    for name, token in (("free-rider", None), ("guesser", "hf_wrong_token_0000")):
        with pytest.raises(InstanceError) as refused:
            stage(in_team_b(name, token), cache)
        assert "wharf/tiny" in str(refused.value)
    assert stage(in_team_b("entitled", TOKEN), cache).name == commit  # its own token: served
    settings.WHARF_HF_ENDPOINT = "http://127.0.0.1:9"  # the hub down
    assert stage(Service.objects.get(name="hubbed"), cache).name == commit  # let in before
    assert stage(in_team_b("again", None), cache).name == commit  # team-b: let in before too
    with pytest.raises(hub.HubUnreachable):  # a workspace the hub never let in
        stage(in_team_b("newcomer", TOKEN, workspace="team-c"), cache)
