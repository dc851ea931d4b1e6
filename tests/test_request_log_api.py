"""A service's request_log through the REST API: what the spec asks reaches the gateways'
routing snapshot, nothing is logged by default, bad settings are a 400 naming the field, and
EAS's sinker is still kept with a warning pointing to request_log."""

from __future__ import annotations

import pytest

from contracts.routing import RequestLogRouting
from controlplane.services.routing import build_snapshot

pytestmark = pytest.mark.django_db


def spec(name: str, **more) -> dict:
    return {"name": name, "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}, **more}


@pytest.mark.parametrize(
    ("request_log", "routed"),
    [
        (None, None),
        ({"keep_days": 30}, None),  # not enabled: settings alone keep nothing
        ({"enabled": True}, RequestLogRouting(7, 65536)),
        ({"enabled": True, "keep_days": 2, "max_body_bytes": 0}, RequestLogRouting(2, 0)),
    ],
)
def test_the_spec_s_request_log_reaches_the_gateways(api, request_log, routed) -> None:
    extra = {} if request_log is None else {"request_log": request_log}
    answer = api.post("/api/v1/services", spec("chat", **extra), format="json")
    assert answer.status_code == 201, answer.json()
    assert build_snapshot().services["chat"].request_log == routed


@pytest.mark.parametrize(
    ("request_log", "field"),
    [
        ({"enabled": True, "keep_days": 400}, "request_log.keep_days"),
        ({"enabled": "sometimes"}, "request_log.enabled"),
        ({"enabled": True, "to": "sls"}, "request_log.to"),
    ],
)
def test_bad_settings_are_a_400_naming_the_field(api, request_log, field) -> None:
    answer = api.post("/api/v1/services", spec("chat", request_log=request_log), format="json")
    assert answer.status_code == 400
    assert field in answer.json()["errors"]
    assert "chat" not in build_snapshot().services


def test_sinker_is_kept_with_a_warning_that_names_request_log(api) -> None:
    sinker = {"type": "sls", "config": {"sls": {"project": "p", "logstore": "l"}}}
    answer = api.post("/api/v1/services", spec("chat", sinker=sinker), format="json")
    assert answer.status_code == 201, answer.json()
    (warning,) = answer.json()["warnings"]
    assert warning["field"] == "sinker" and "request_log" in warning["message"]
    assert build_snapshot().services["chat"].request_log is None
