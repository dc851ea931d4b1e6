"""Streaming through the gateway: chunks relayed as made, and client aborts reaching the engine."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from gateway_support import Deployed, openai_client

pytestmark = pytest.mark.timeout(30)


def wait_for(condition: object, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.02)
    return False


def test_stream_relays_each_chunk_before_the_engine_finishes(
    deployed: Deployed, http: httpx.Client
) -> None:
    test_id = uuid.uuid4().hex
    body = {"model": "tiny", "prompt": "x", "stream": True, "max_tokens": 5, "chunk_delay": 0.2}
    arrivals: list[tuple[float, bytes]] = []
    with http.stream(
        "POST",
        deployed.gateway.url + "/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {deployed.token}", "x-test-id": test_id},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-wharf-instance"] == "engine-a"
        for chunk in response.iter_raw():
            arrivals.append((time.monotonic(), chunk))

    finished_at = deployed.engine.recorder.seen[test_id].finished_at
    assert finished_at is not None
    # The engine spends ~0.8 s between its first and last chunk; the first must not wait for it.
    assert arrivals[0][0] < finished_at - 0.5
    events = [e for e in b"".join(c for _, c in arrivals).split(b"\n\n") if e]
    texts = [json.loads(e.removeprefix(b"data: "))["choices"][0]["text"] for e in events[:-1]]
    assert texts == [f"engine-a-{i} " for i in range(5)]
    assert events[-1] == b"data: [DONE]"


def test_openai_client_streams_chat_completion(deployed: Deployed) -> None:
    with openai_client(deployed.gateway, deployed.token) as client:
        stream = client.chat.completions.create(
            model="tiny-alias",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=3,
            stream=True,
        )
        pieces = [chunk.choices[0].delta.content for chunk in stream]
    assert pieces == ["engine-a-0 ", "engine-a-1 ", "engine-a-2 "]


def test_openai_client_streams_completion(deployed: Deployed) -> None:
    with openai_client(deployed.gateway, deployed.token) as client:
        stream = client.completions.create(model="tiny", prompt="x", max_tokens=3, stream=True)
        text = "".join(chunk.choices[0].text for chunk in stream)
    assert text == "engine-a-0 engine-a-1 engine-a-2 "


def test_client_leaving_mid_stream_aborts_the_engine_request(
    deployed: Deployed, http: httpx.Client
) -> None:
    test_id = uuid.uuid4().hex
    body = {"model": "tiny", "prompt": "x", "stream": True, "max_tokens": 50, "chunk_delay": 0.1}
    with http.stream(
        "POST",
        deployed.gateway.url + "/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {deployed.token}", "x-test-id": test_id},
    ) as response:
        chunks = response.iter_raw()
        next(chunks)
    # Leaving the block closes the connection after one chunk of fifty.
    seen = deployed.engine.recorder.seen[test_id]
    assert wait_for(lambda: seen.aborted), "the engine kept generating for a departed client"
    assert seen.finished_at is None


def test_client_leaving_before_the_answer_aborts_the_engine_request(
    deployed: Deployed, http: httpx.Client
) -> None:
    test_id = uuid.uuid4().hex
    with pytest.raises(httpx.ReadTimeout):
        http.post(
            deployed.gateway.url + "/v1/completions",
            json={"model": "tiny", "prompt": "x", "delay": 3},
            headers={"Authorization": f"Bearer {deployed.token}", "x-test-id": test_id},
            timeout=0.3,
        )
    assert wait_for(lambda: deployed.engine.recorder.seen[test_id].aborted)
