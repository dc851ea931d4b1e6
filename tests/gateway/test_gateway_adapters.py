"""What a `model` names when services have LoRA adapters (contracts.routing.Snapshot.find_model,
gateway.callers.eas_adapter): tables, no servers."""

from __future__ import annotations

import pytest

from contracts.routing import RoutedKey, RoutedService, Snapshot
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


SCOPES = [
    # (key scope, service, adapter, allowed)
    (None, "assistant", "", True),
    (None, "assistant", "sql", True),
    (frozenset({"assistant"}), "assistant", "chat", True),
    (frozenset({"assistant:sql"}), "assistant", "sql", True),
    (frozenset({"assistant:sql"}), "assistant", "chat", False),
    (frozenset({"assistant:sql"}), "assistant", "", False),  # not the base model
    (frozenset({"assistant:sql"}), "coder", "sql", False),
    (frozenset({"coder"}), "assistant", "sql", False),
]


@pytest.mark.parametrize(("scope", "service", "adapter", "allowed"), SCOPES)
def test_a_key_scoped_to_an_adapter_calls_that_adapter_alone(scope, service, adapter, allowed):
    key = RoutedKey("k1", services=scope)
    assert key.allows(service, 0.0, adapter) is allowed
    assert key.reaches(service) is (scope is None or any(
        s == service or s.startswith(service + ":") for s in scope))  # fmt: skip
    assert not RoutedKey("k2", services=scope, expires_at=1.0).allows(service, 5.0, adapter)


def test_models_list_only_the_adapters_a_key_may_call():
    caller = Caller("k1", RoutedKey("k1", services=frozenset({"assistant:sql", "plain"})))
    assert callable_models(SNAPSHOT, caller, 0.0) == [("tiny:sql", "tiny"), ("plain", "")]
