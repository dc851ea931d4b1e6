"""A model name belongs to one service platform-wide (real database): a served model name, a
service name or a '<model>:<adapter>' id that another service answers to is a 409 naming the
field, whichever workspace holds the other service, which is then not named."""

from __future__ import annotations

import importlib
import threading

import pytest
from django.apps import apps as django_apps
from django.db import connection, transaction

from contracts.spec import typed_spec
from controlplane.services.models import ModelName, Service
from controlplane.services.names import NameTaken, claim_model_names
from tests.api_support import client_for

pytestmark = pytest.mark.django_db


def spec(name: str, served: str | None = None, adapters=()) -> dict:
    llm = {"engine": "vllm-cpu", "model": "tiny-llama"}
    if served:
        llm["served_model_name"] = served
    if adapters:
        llm["lora"] = {"adapters": [{"name": a, "model": f"tiny-{a}"} for a in adapters]}
    return {"name": name, "llm": llm}


@pytest.fixture
def team_b(db):
    return client_for("bob", role="developer", workspace="team-b")


def test_another_workspace_cannot_take_a_served_model_name(api, team_b, store):
    assert api.post("/api/v1/services", spec("a", "qwen"), format="json").status_code == 201
    answer = team_b.post("/api/v1/services", spec("b", "qwen"), format="json")
    assert answer.status_code == 409
    message = answer.json()["errors"]["llm.served_model_name"][0]
    assert "'qwen' is served by another service" in message and "'a'" not in message
    assert not Service.objects.filter(name="b").exists()


@pytest.mark.parametrize(
    ("first", "second", "field"),
    [
        (spec("a", "qwen"), spec("qwen"), "name"),  # a name that is another's served name
        (spec("qwen"), spec("b", "qwen"), "llm.served_model_name"),
        (spec("a", "m", ["sql"]), spec("b", "m:sql"), "llm.served_model_name"),
        (spec("a", "m:sql"), spec("b", "m", ["sql"]), "llm.lora.adapters[0].name"),
    ],
)
def test_a_model_id_another_service_answers_to_is_a_409(api, store, first, second, field):
    assert api.post("/api/v1/services", first, format="json").status_code == 201
    answer = api.post("/api/v1/services", second, format="json")
    assert answer.status_code == 409 and field in answer.json()["errors"], answer.json()
    assert "service 'a'" in str(answer.json()) or "service 'qwen'" in str(answer.json())


def test_an_update_may_keep_its_own_names_but_not_take_another(api, store):
    assert api.post("/api/v1/services", spec("a", "qwen"), format="json").status_code == 201
    assert api.post("/api/v1/services", spec("b", "llama"), format="json").status_code == 201
    assert api.put("/api/v1/services/a", spec("a", "qwen"), format="json").status_code == 200
    answer = api.put("/api/v1/services/a", spec("a", "llama"), format="json")
    assert answer.status_code == 409
    assert "llm.served_model_name" in answer.json()["errors"]


def create(api, body: dict) -> None:
    answer = api.post("/api/v1/services", body, format="json")
    assert answer.status_code == 201, answer.json()


def held(service: str) -> set[str]:
    return set(ModelName.objects.filter(service__name=service).values_list("name", flat=True))


def test_a_service_holds_exactly_the_ids_its_spec_serves_and_lets_go_of_the_rest(api, store):
    create(api, spec("a", "qwen", ["sql"]))
    assert held("a") == {"a", "qwen", "a:sql", "qwen:sql"}
    assert api.put("/api/v1/services/a", spec("a", "llama"), format="json").status_code == 200
    assert held("a") == {"a", "llama"}
    # what it let go of is free at once, to any service
    create(api, spec("b", "qwen"))


def test_a_deleted_service_lets_go_of_its_names_at_once(api, store):
    create(api, spec("a", "qwen"))
    assert api.delete("/api/v1/services/a").status_code == 202
    assert Service.objects.filter(name="a").exists()  # its instances are still being removed
    assert held("a") == set()
    create(api, spec("b", "qwen"))


def test_a_rollback_to_a_name_another_service_took_meanwhile_is_a_409(api, store):
    create(api, spec("a", "qwen"))
    assert api.put("/api/v1/services/a", spec("a", "llama"), format="json").status_code == 200
    create(api, spec("b", "qwen"))
    answer = api.post("/api/v1/services/a/rollback", {}, format="json")
    assert answer.status_code == 409 and "llm.served_model_name" in answer.json()["errors"]
    assert held("a") == {"a", "llama"} and held("b") == {"b", "qwen"}


def test_a_canary_claims_its_adapters_when_promoted_and_is_aborted_if_one_was_taken(api, store):
    create(api, spec("a", "qwen"))
    started = api.post("/api/v1/services/a/canary", {"spec": spec("a", "qwen", ["sql"])},
                       format="json")  # fmt: skip
    assert started.status_code == 201, started.json()
    assert api.post("/api/v1/services/a/canary/promote").json()["state"] == "promoted"
    assert held("a") == {"a", "qwen", "a:sql", "qwen:sql"}

    create(api, spec("b", "m"))
    refused = api.post("/api/v1/services/b/canary", {"spec": spec("b", "m", ["x"])}, format="json")
    assert refused.status_code == 201
    # taken between the canary's start and its promotion
    create(api, spec("c", "m:x"))
    ended = api.post("/api/v1/services/b/canary/promote").json()
    assert ended["state"] == "aborted" and "'m:x' is served by service 'c'" in ended["message"]
    assert held("b") == {"b", "m"} and Service.objects.get(name="b").spec == spec("b", "m")


def test_a_canary_serving_another_services_name_does_not_start(api, store):
    create(api, spec("a", "m:x"))
    create(api, spec("b", "m"))
    answer = api.post("/api/v1/services/b/canary", {"spec": spec("b", "m", ["x"])}, format="json")
    assert answer.status_code == 409 and "llm.lora.adapters[0].name" in answer.json()["errors"]


@pytest.mark.django_db(transaction=True)
def test_two_writes_claiming_one_name_at_once_one_wins_the_other_is_refused(api):
    """The second claim reads before the first commits, so only the unique index can tell:
    it waits for the first and is refused, naming the winner."""
    for name in ("a", "b"):
        create(api, spec(name))
    first, second = (Service.objects.get(name=name) for name in ("a", "b"))
    claimed, go_on = threading.Event(), threading.Event()

    def claim_first():
        with transaction.atomic():
            claim_model_names(typed_spec(spec("a", "qwen")), first)
            claimed.set()
            go_on.wait(10)
        connection.close()

    thread = threading.Thread(target=claim_first)
    thread.start()
    assert claimed.wait(10)
    threading.Timer(0.5, go_on.set).start()  # commits while the second waits on the index
    with pytest.raises(NameTaken) as refused, transaction.atomic():
        claim_model_names(typed_spec(spec("b", "qwen")), second)
    thread.join(10)
    assert "'qwen' is served by service 'a'" in str(refused.value.errors)
    assert held("a") == {"a", "qwen"} and held("b") == {"b"}


def test_the_migration_gives_each_live_service_its_ids_the_older_keeps_one_shared(api, store):
    create(api, spec("a", "qwen"))
    create(api, spec("b", "llama"))
    create(api, spec("gone", "phi"))
    assert api.delete("/api/v1/services/gone").status_code == 202
    # as stored before the rule: b serves qwen too, and an old spec no longer parses
    Service.objects.filter(name="b").update(spec=spec("b", "qwen"))
    Service.objects.filter(name="gone").update(desired_state="running", spec={"name": 1})
    ModelName.objects.all().delete()
    migration = importlib.import_module("controlplane.services.migrations.0018_model_names")
    migration.held_names(django_apps, None)
    assert held("a") == {"a", "qwen"} and held("b") == {"b"} and held("gone") == {"gone"}
