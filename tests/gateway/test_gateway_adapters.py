"""What a `model` names when services have LoRA adapters (contracts.routing.Snapshot.find_model,
gateway.callers.eas_adapter): tables, no servers."""

from __future__ import annotations

import pytest

from contracts.routing import RoutedService, Snapshot
from gateway.callers import Caller, callable_models, eas_adapter

SERVICES = {
    "assistant": RoutedService("assistant", ("tiny",), adapters=("sql", "chat")),
    "coder": RoutedService("coder", ("qwen:7b",), adapters=("py",)),  # a served name with ':'
    "plain": RoutedService("plain"),
}
SNAPSHOT = Snapshot(1, SERVICES)

FOUND = [
    ("tiny", "assistant", ""),
    ("assistant", "assistant", ""),
    ("tiny:sql", "assistant", "sql"),
    ("assistant:chat", "assistant", "chat"),
    ("qwen:7b", "coder", ""),
    ("qwen:7b:py", "coder", "py"),
    ("coder:py", "coder", "py"),
    ("plain", "plain", ""),
]
MISSING = ["tiny:nope", "plain:sql", "sql", "tiny:", ":sql", "qwen:py", "tiny:sql:x"]


@pytest.mark.parametrize(("model", "service", "adapter"), FOUND)
def test_a_model_names_a_service_and_maybe_an_adapter(model, service, adapter):
    match = SNAPSHOT.find_model(model)
    assert match is not None and (match.service.name, match.adapter) == (service, adapter)


@pytest.mark.parametrize("model", MISSING)
def test_what_names_no_adapter_is_no_model(model):
    assert SNAPSHOT.find_model(model) is None


EAS = [
    ("assistant", None, ""),
    ("assistant", "", ""),
    ("assistant", "tiny", ""),
    ("assistant", "assistant", ""),
    ("assistant", "sql", "sql"),
    ("assistant", "tiny:sql", "sql"),
    ("assistant", "assistant:chat", "chat"),
    ("assistant", "nope", None),
    ("assistant", "coder:py", None),
    ("assistant", 7, ""),  # not a name: the engine answers for the base model, as before
    ("plain", "anything", ""),  # a service without adapters takes any model, as it always has
]


@pytest.mark.parametrize(("service", "model", "adapter"), EAS)
def test_the_eas_forms_model_picks_an_adapter_of_the_urls_service(service, model, adapter):
    assert eas_adapter(SERVICES[service], model) == adapter


def test_models_list_adapters_under_their_base_and_the_snapshot_keeps_them():
    caller = Caller("k1", services=frozenset({"assistant", "coder"}))
    assert callable_models(SNAPSHOT, caller, 0.0) == [
        ("tiny", ""), ("tiny:sql", "tiny"), ("tiny:chat", "tiny"),
        ("qwen:7b", ""), ("qwen:7b:py", "qwen:7b"),
    ]  # fmt: skip
    again = Snapshot.from_json(SNAPSHOT.to_json())
    assert again.services["assistant"].adapters == ("sql", "chat")
    assert again.services["plain"].adapters == ()
