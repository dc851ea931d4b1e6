"""OpenAI's Batch API end to end: OpenAI's own SDK (the `openai` package, unchanged) uploads a
file and runs a batch through a real gateway process, which relays /v1/files and /v1/batches to
a live API server (the test database) and feeds the batch's requests to a small OpenAI-shaped
engine process; per-line errors, another workspace's 404, cancel, the tokens on the key, and
online calls going first (no queued request starts while one is in flight)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
import redis
from click.testing import CliRunner
from django.db import connection

from controlplane.queues.models import QueueItem
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_snapshot
from tests.api_support import client_for
from tests.test_async_queues import ROOT, _Engine, _gateway, _wait
from wharfcli.main import cli

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor == "sqlite", reason="needs PostgreSQL (as its queues)"),
]
SPEC = {
    "metadata": {"name": "chat", "instance": 1, "rpc.worker_threads": 2},
    "containers": [{"image": "registry.example/chat:1", "command": "serve", "port": 8000}],
}


class _EchoEngine(_Engine):
    def __init__(self) -> None:
        import subprocess  # noqa: PLC0415
        import sys  # noqa: PLC0415

        from tests.test_eas_sdk import _free_port  # noqa: PLC0415

        self.port = _free_port()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/openai_echo_engine.py"), str(self.port)]
        )
        _wait(lambda: httpx.get(f"{self.url}/log", timeout=1).status_code == 200, 10)

    def log(self) -> list[list]:
        return httpx.get(f"{self.url}/log").json()


def chat_on_an_echo_engine(api, settings, tmp_path) -> _EchoEngine:  # noqa: ANN001
    """The service `chat` created through the API, its one instance an echo engine that is
    ready; batch files under tmp_path."""
    settings.WHARF_BATCH_DIR = tmp_path / "files"
    engine = _EchoEngine()
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    Instance.objects.create(
        service=Service.objects.get(name="chat"), name="chat-0", node="n1", runtime="process",
        spec_hash="h", url=engine.url, state=InstanceState.READY,
    )  # fmt: skip
    return engine


@pytest.fixture
def stack(api, store, settings, redis_url, live_server, tmp_path) -> Iterator[dict]:
    engine = chat_on_an_echo_engine(api, settings, tmp_path)
    key = api.post("/api/v1/keys", {"name": "batch"}, format="json").json()
    other = client_for("bob", workspace="elsewhere")
    stranger = other.post("/api/v1/keys", {"name": "theirs"}, format="json").json()
    publish_snapshot(force=True)
    gateway = _gateway(live_server, redis_url, settings, tmp_path, "gateway")
    base = f"http://{gateway.address}/v1"
    made = {
        "engine": engine, "gateway": gateway, "key": key, "redis": redis_url,
        "client": openai.OpenAI(base_url=base, api_key=key["key"], max_retries=0),
        "stranger": openai.OpenAI(base_url=base, api_key=stranger["key"], max_retries=0),
    }  # fmt: skip
    try:
        _wait(lambda: _serves(made["client"]))
        yield made
    finally:
        gateway.stop()
        engine.kill()


def _serves(client: openai.OpenAI) -> bool:
    try:
        return client.models.list().data != []
    except openai.APIConnectionError:
        return False


def _line(custom_id: str, **body: object) -> str:
    body = {"model": "chat", "messages": [{"role": "user", "content": custom_id}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": body})  # fmt: skip


def _run(client: openai.OpenAI, lines: list[str]):  # noqa: ANN202 (OpenAI's Batch)
    uploaded = client.files.create(file=("in.jsonl", "\n".join(lines).encode()), purpose="batch")
    return client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def _until(client: openai.OpenAI, batch_id: str, *statuses: str, timeout: float = 20):  # noqa: ANN202
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} is still {batch.status}")


def _jsonl(client: openai.OpenAI, file_id: str) -> dict[str, dict]:
    lines = [json.loads(t) for t in client.files.content(file_id).text.splitlines()]
    return {line["custom_id"]: line for line in lines}


def test_the_openai_sdk_runs_a_batch_with_per_line_errors(stack):
    client = stack["client"]
    usage = redis.Redis.from_url(stack["redis"])
    for name in usage.keys("wharf:usage:*"):  # an earlier run's
        usage.delete(name)
    lines = [
        _line("a"), _line("b"), _line("c"), _line("bad", fail=True), "not json",
        json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {"model": "chat"}}),
        _line("wrong-url").replace("/v1/chat/completions", "/v1/embeddings"),
        _line("nobody", model="not-served"), _line("a"),
    ]  # fmt: skip
    batch = _run(client, lines)
    assert batch.status == "in_progress" and batch.completion_window == "24h"
    done = _until(client, batch.id, "completed")
    assert done.request_counts.total == 9
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 6)
    assert done.completed_at and done.finalizing_at and done.in_progress_at
    output = _jsonl(client, done.output_file_id)
    assert set(output) == {"a", "b", "c", "bad"}
    assert output["a"]["response"]["status_code"] == 200 and output["a"]["error"] is None
    assert "a" in output["a"]["response"]["body"]["choices"][0]["message"]["content"]
    assert output["bad"]["response"]["status_code"] == 400
    errors = client.files.content(done.error_file_id).text.splitlines()
    codes = sorted(json.loads(e)["error"]["code"] for e in errors)
    assert codes == ["duplicate_custom_id", "invalid_json_line", "mismatched_endpoint",
                     "missing_required_parameter", "model_not_found"]  # fmt: skip
    # The same lines in the batch's `errors`, by their numbers in the input file.
    assert [(e.line, e.code) for e in done.errors.data] == [
        (5, "invalid_json_line"), (6, "missing_required_parameter"), (7, "mismatched_endpoint"),
        (8, "model_not_found"), (9, "duplicate_custom_id"),
    ]  # fmt: skip
    # Another workspace's key: as if none of it existed.
    with pytest.raises(openai.NotFoundError):
        stack["stranger"].batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        stack["stranger"].files.content(done.output_file_id)
    assert stack["stranger"].batches.list().data == []
    assert [b.id for b in client.batches.list().data] == [batch.id]
    files = client.files.list(limit=2)  # the input, the output and the error file
    assert len(files.data) == 2 and files.has_more
    rest = client.files.list(limit=2, after=files.data[-1].id)
    assert len(rest.data) == 1 and not rest.has_more
    assert QueueItem.objects.count() == 0  # answers are in the output file
    # The answered requests' tokens count on the key, as online calls' do.
    key_id = stack["key"]["id"]
    counted: dict[str, int] = {}
    for _ in range(50):  # the gateway sends its counts once a second: all three may take two
        counted = {}
        for name in usage.keys("wharf:usage:*"):
            for field, value in usage.hgetall(name).items():
                service, key, kind = field.decode().split("|")
                if (service, key) == ("chat", key_id):
                    counted[kind] = counted.get(kind, 0) + int(value)
        if counted.get("requests", 0) >= 3:
            break
        time.sleep(0.2)
    # a, b and c: 5 completion tokens each; a 400 counts nothing; said to be a batch's
    assert counted["completion"] == counted["batch_completion"] == 15
    assert counted["requests"] == counted["batch_requests"] == 3
    # Bounds: the window OpenAI takes, and files of batches only.
    uploaded = client.files.create(file=("x.jsonl", _line("x").encode()), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                              completion_window="1h")  # type: ignore[arg-type]  # fmt: skip
    assert client.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_cancel_drops_waiting_requests_and_lets_running_ones_finish(stack):
    client = stack["client"]
    batch = _run(client, [_line(f"r{i}", hold=1.0) for i in range(8)])
    _wait(lambda: QueueItem.objects.filter(batch_id=batch.id, state="working").count() == 2)
    assert client.batches.cancel(batch.id).status == "cancelling"
    done = _until(client, batch.id, "cancelled")
    assert done.cancelled_at and done.request_counts.completed == 2
    assert len(_jsonl(client, done.output_file_id)) == 2
    assert QueueItem.objects.count() == 0


def test_online_calls_go_first(stack, live_server, redis_url, settings, tmp_path):
    """While online calls are in flight, no queued request starts, at this gateway or at
    another that feeds the same service; they run once online traffic stops."""
    client, engine = stack["client"], stack["engine"]
    other = _gateway(live_server, redis_url, settings, tmp_path, "other")
    try:
        second = openai.OpenAI(base_url=f"http://{other.address}/v1", api_key=stack["key"]["key"])
        _wait(lambda: _serves(second))
        _online_first(client, engine)
    finally:
        other.stop()


def _online_first(client: openai.OpenAI, engine: _EchoEngine) -> None:
    online_until = time.monotonic() + 3.0
    online_errors: list[int] = []

    def online() -> None:
        while time.monotonic() < online_until:
            answer = client.chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "hi"}],
                extra_body={"hold": 0.3, "tag": "online"},
            )  # fmt: skip
            if answer.http_response.status_code != 200:
                online_errors.append(answer.http_response.status_code)

    callers = [threading.Thread(target=online) for _ in range(2)]
    for caller in callers:  # staggered: one is always in flight
        caller.start()
        time.sleep(0.15)
    time.sleep(1.0)  # the other gateway has read this one's in-flight report
    batch = _run(client, [_line(f"q{i}", hold=0.2, tag="batch") for i in range(6)])
    for caller in callers:
        caller.join()
    done = _until(client, batch.id, "completed")
    assert done.request_counts.completed == 6 and not online_errors
    log = engine.log()
    calls = [(start, end) for tag, start, end in log if tag == "online"]
    queued = [start for tag, start, _ in log if tag == "batch"]
    assert len(queued) == 6 and len(calls) >= 10
    # None started while an online call was in flight (a margin for one already handed out).
    overlapping = [s for s in queued for a, b in calls if a + 0.15 < s < b]
    assert overlapping == []


def test_the_cli_runs_a_batch_and_prints_its_output(stack, tmp_path):
    requests = tmp_path / "requests.jsonl"
    requests.write_text("\n".join([_line("one"), _line("two", model="nobody")]))
    env = {
        "WHARF_GATEWAY_URL": f"http://{stack['gateway'].address}",
        "WHARF_API_KEY": stack["key"]["key"],
        "WHARF_CONFIG_DIR": str(tmp_path / "wharf"),
    }

    def wharf(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["batch", *args], env=env)
        return result.exit_code, result.output

    code, out = wharf("create", str(requests), "-o", "json")
    assert code == 0, out
    batch_id = json.loads(out)["id"]
    _until(stack["client"], batch_id, "completed")
    code, out = wharf("show", batch_id)
    assert code == 0 and "completed" in out and "failed:" in out, out
    code, out = wharf("output", batch_id)
    assert code == 0 and json.loads(out)["custom_id"] == "one", out
    code, out = wharf("output", batch_id, "--errors")
    assert code == 0 and json.loads(out)["error"]["code"] == "model_not_found", out
    code, out = wharf("list")
    assert code == 0 and batch_id in out, out
    listed = CliRunner().invoke(cli, ["batches", "list"], env=env)  # the plural, as OpenAI's API
    assert listed.exit_code == 0 and batch_id in listed.output, listed.output
    code, out = wharf("show", "batch_nope")
    assert code == 4 and "404" in out, out
