"""The gateway's settings for queues and outages (gateway.config): taken when valid, refused
naming the variable when not."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_settings


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("WHARF_API_URL", "https://api.internal:8443/", "api_url", "https://api.internal:8443/"),
        ("WHARF_GATEWAY_QUEUE_LEASE", "5", "queue_lease", 5.0),
        ("WHARF_LIMITS_ON_REDIS_DOWN", "Closed", "limits_on_redis_down", "closed"),
        ("WHARF_LIMITS_ON_REDIS_DOWN", "open", "limits_on_redis_down", "open"),
        ("WHARF_BATCH_WINDOW", "16", "batch_window", 16),
    ],
)
def test_a_valid_setting_is_taken(monkeypatch, variable, value, field, expected):
    monkeypatch.setenv("WHARF_TOKEN_KEY", "token-key")
    monkeypatch.setenv(variable, value)
    assert getattr(load_settings(), field) == expected


def test_the_defaults(monkeypatch):
    monkeypatch.setenv("WHARF_TOKEN_KEY", "token-key")
    for variable in ("WHARF_API_URL", "WHARF_GATEWAY_QUEUE_LEASE", "WHARF_LIMITS_ON_REDIS_DOWN",
                     "WHARF_BATCH_WINDOW"):  # fmt: skip
        monkeypatch.delenv(variable, raising=False)
    settings = load_settings()
    assert (settings.api_url, settings.queue_lease, settings.limits_on_redis_down,
            settings.batch_window) == ("http://127.0.0.1:8000", 30.0, "local", 4)  # fmt: skip


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WHARF_API_URL", "api.internal:8000"),
        ("WHARF_GATEWAY_QUEUE_LEASE", "0.5"),
        ("WHARF_GATEWAY_QUEUE_LEASE", "7200"),
        ("WHARF_LIMITS_ON_REDIS_DOWN", "sometimes"),
        ("WHARF_BATCH_WINDOW", "0"),
    ],
)
def test_a_bad_setting_stops_the_gateway_naming_it(monkeypatch, variable, value):
    monkeypatch.setenv("WHARF_TOKEN_KEY", "token-key")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        load_settings()
