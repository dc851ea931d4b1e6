"""A model name belongs to one service platform-wide (real database): a served model name, a
service name or a '<model>:<adapter>' id that another service answers to is a 409 naming the
field, whichever workspace holds the other service, which is then not named."""

from __future__ import annotations

import pytest

from controlplane.services.models import Service
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
