"""A job (metadata.workload_type: elasticjob) takes no calls: the gateway answers 409 naming
it, in the OpenAI form and the EAS form alike, rather than a 503 that says to retry."""

from __future__ import annotations

from gateway_support import assert_error, make_token, snapshot

from contracts.routing import RoutedService


def test_a_call_to_a_job_is_a_409_naming_it(start_gateway, http):
    token, digest = make_token()
    job = RoutedService("export", ("export",), frozenset([digest]), (), rate_limit=0,
                        engine="custom", job=True)  # fmt: skip
    gateway = start_gateway(snapshot(1, job))
    body = {"model": "export", "prompt": "hi", "max_tokens": 2}
    headers = {"Authorization": f"Bearer {token}"}
    answer = http.post(f"{gateway.url}/v1/completions", json=body, headers=headers)
    assert_error(answer, 409, "invalid_request_error", "service_is_a_job")
    assert "'export' is a job" in answer.json()["error"]["message"]
    answer = http.post(f"{gateway.url}/api/predict/export/run", json=body, headers=headers)
    assert answer.status_code == 409 and "is a job" in answer.text
    assert "retry-after" not in answer.headers


def test_a_job_is_in_the_snapshot_as_one():
    from contracts.routing import Snapshot

    job = RoutedService("export", ("export",), frozenset(), (), rate_limit=0, job=True)
    read = Snapshot.from_json(snapshot(3, job).to_json())
    assert read.services["export"].job
