"""EAS's admission settings from a service JSON to the gateways' routing snapshot:
metadata.rpc.worker_threads in each of EAS's spellings, networking.gateway_policy as published
(tests/eas_corpus/04), and how the two requests/s limits combine (the lower wins)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.eas import normalise
from contracts.spec import SpecError, parse_spec
from contracts.spec_cloud import cloud_only_warnings
from contracts.spec_gateway_policy import GatewayPolicy, PolicyLimit, service_rate_limit
from controlplane.services.routing import build_snapshot

IMAGE = {"image": "registry.example/team/app:1", "command": "serve", "port": 8000}
POLICY = json.loads((Path(__file__).parent / "eas_corpus" / "04-json-deploy-gateway-policy.json")
                    .read_text())  # fmt: skip


def doc(**parts) -> dict:
    return {"name": "svc", "containers": [dict(IMAGE)], **parts}


@pytest.mark.parametrize(
    "metadata",
    [{"rpc": {"worker_threads": 3}}, {"rpc.worker_threads": "3"}, {"worker_threads": 3},
     {"workers": 3}],
    ids=["rpc", "flat-string", "metadata.worker_threads", "metadata.workers"],
)  # fmt: skip
def test_worker_threads_in_each_eas_spelling(metadata: dict) -> None:
    assert parse_spec(normalise(doc(metadata=metadata))).metadata.rpc.worker_threads == 3


def test_the_published_gateway_policy_is_read_with_strings_for_numbers() -> None:
    written = {"rate_limit": {"enable": "true", "limit": "100"},
               "concurrency_limit": {"enable": True, "limit": 50}}  # fmt: skip
    policy = parse_spec(normalise(doc(networking={"gateway_policy": written}))).networking
    assert policy is not None and policy.gateway_policy == GatewayPolicy(
        rate_limit=PolicyLimit(enable=True, limit=100),
        concurrency_limit=PolicyLimit(enable=True, limit=50),
    )


def test_an_enabled_limit_without_its_number_is_refused_by_name() -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec(normalise(doc(networking={"gateway_policy": {"rate_limit": {"enable": True}}})))
    assert raised.value.errors == {
        "networking.gateway_policy.rate_limit": ["limit is required when enable is true"]
    }


def test_admission_settings_roll_no_instance_and_warn_nothing() -> None:
    """The gateway acts on them alone: the instances stay as they are."""
    plain = doc()
    more = {**doc(metadata={"workers": 4}), **POLICY}
    assert parse_spec(normalise(more)).spec_hash() == parse_spec(plain).spec_hash()
    assert cloud_only_warnings(normalise(more)) == []


@pytest.mark.parametrize(
    ("rpc_rate", "policy", "rate"),
    [
        (None, None, None),
        (20, None, 20),
        (None, PolicyLimit(enable=True, limit=30), 30),
        (20, PolicyLimit(enable=True, limit=30), 20),  # the lower wins
        (50, PolicyLimit(enable=True, limit=30), 30),
        (20, PolicyLimit(enable=False, limit=5), 20),  # a disabled limit is no limit
    ],
)
def test_the_lower_requests_per_second_wins(
    rpc_rate: int | None, policy: PolicyLimit | None, rate: int | None
) -> None:
    assert service_rate_limit(rpc_rate, GatewayPolicy(rate_limit=policy)) == rate


@pytest.mark.django_db
def test_the_snapshot_carries_what_the_gateways_enforce(api, store) -> None:
    sent = {**doc(metadata={"workers": 2, "rpc.rate_limit": 500, "rpc.max_queue_size": 8}),
            **POLICY}  # fmt: skip
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    routed = build_snapshot().services["svc"]
    assert (routed.rate_limit, routed.concurrency_limit) == (100, 50)  # the policy's: lower
    assert (routed.worker_threads, routed.max_queue_size) == (2, 8)
