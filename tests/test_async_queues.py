"""Async services end to end: EAS's own `QueueClient` (eas-prediction, from PyPI) puts items in
a real gateway process, which relays EAS's queue API to the control plane's store (a live API
server, the test database) and feeds the instances (small engine processes) itself; the SDK
watches the sink over a WebSocket and commits. An instance killed with -9 while it works on an
item gives it to another; with queue.max_delivery 1 the sink holds the failure instead; a
gateway killed with -9 loses nothing: its lease lapses and another gateway finishes the item."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from django.contrib.auth import get_user_model
from django.db import connection
from eas_prediction import QueueClient

from controlplane.queues.models import QueueItem
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_snapshot
from controlplane.tokens.models import ApiToken
from tests.api_support import member
from tests.test_eas_sdk import _free_port, _GatewayProcess
from wharfcli.main import cli

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # The live server's threads share one connection to an in-memory SQLite test database,
    # which concurrent calls break; Wharf's own SQLite (a file, WAL) and PostgreSQL (CI) do not.
    pytest.mark.skipif(connection.vendor == "sqlite", reason="needs PostgreSQL (see above)"),
]
ROOT = Path(__file__).resolve().parents[1]
METRICS_TOKEN = "queue-test-metrics-token"
SPEC = {
    "metadata": {"name": "sd", "instance": 2, "type": "Async", "rpc.worker_threads": 2},
    "queue": {"max_delivery": 2, "cpu": 1, "memory": 4000},
    "containers": [{"image": "registry.example/sd:1", "command": "serve", "port": 8000}],
}


class _Engine:
    def __init__(self) -> None:
        self.port = _free_port()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/queue_engine.py"), str(self.port)]
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.post(f"{self.url}/", content=b"{}", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("the engine never answered")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


def _gateway(live_server, redis_url, settings, tmp_path, name: str) -> _GatewayProcess:
    os.environ["WHARF_API_URL"] = live_server.url
    os.environ["WHARF_GATEWAY_QUEUE_LEASE"] = "3"
    os.environ["WHARF_GATEWAY_METRICS_TOKEN"] = METRICS_TOKEN
    try:
        return _GatewayProcess(redis_url, settings.WHARF_TOKEN_KEY, tmp_path / f"{name}.log")
    finally:
        for variable in (
            "WHARF_API_URL",
            "WHARF_GATEWAY_QUEUE_LEASE",
            "WHARF_GATEWAY_METRICS_TOKEN",
        ):
            del os.environ[variable]


@pytest.fixture
def stack(api, store, settings, redis_url, live_server, tmp_path) -> Iterator[dict]:
    """An Async service `sd` (2 items per instance at once, up to 2 deliveries) on two engines;
    a gateway process serving it."""
    engines = [_Engine(), _Engine()]
    answer = api.post("/api/v1/services", SPEC, format="json")
    assert answer.status_code == 201, answer.json()
    warned = {w["field"] for w in answer.json().get("warnings", [])}
    assert {"queue.cpu", "queue.memory"} <= warned, answer.json()
    service = Service.objects.get(name="sd")
    for i, engine in enumerate(engines):
        Instance.objects.create(
            service=service,
            name=f"sd-{i}",
            node="n1",
            runtime="process",
            spec_hash="h",
            url=engine.url,
            state=InstanceState.READY,
        )
    publish_snapshot(force=True)
    gateway = _gateway(live_server, redis_url, settings, tmp_path, "gateway")
    made = {"gateway": gateway, "token": answer.json()["token"], "engines": engines, "extra": []}
    try:
        _wait(
            lambda: (
                httpx.get(
                    f"http://{gateway.address}/api/predict/sd?_attrs_=true",
                    headers={"Authorization": made["token"]},
                ).status_code
                == 200
            )
        )
        yield made
    finally:
        for process in (gateway, *made["extra"]):
            process.stop()
        for engine in engines:
            if engine.process.poll() is None:
                engine.kill()


def _wait(check, timeout: float = 30) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("timed out")


def _queues(stack: dict) -> tuple[QueueClient, QueueClient]:
    made = []
    for name in ("sd", "sd/sink"):
        client = QueueClient(stack["gateway"].address, name)
        client.set_token(stack["token"])
        client.init()
        client.set_timeout(30_000)
        made.append(client)
    return made[0], made[1]


def _sink_items(service: str = "sd") -> list[QueueItem]:
    return list(QueueItem.objects.filter(service__name=service, queue="sink").order_by("id"))


def test_the_sdk_puts_watches_the_sink_and_commits(stack):
    inputs, sink = _queues(stack)
    sent = {}
    for i in range(8):
        index, request_id = inputs.put(
            json.dumps({"n": i, "hold": 0.3}).encode(), tags={"task_id": f"job-{i}"}
        )
        assert int(index) > 0 and request_id
        sent[request_id] = i
    seen = {}
    watcher = sink.watch(0, 5, auto_commit=False)
    for frame in watcher.run():
        answer = json.loads(frame.data)
        assert answer["authorized"]  # the engine's key, as for any call the gateway forwards
        tags = dict(frame.tags)
        assert (
            tags["lastCode"] == "200"
            and tags["task_id"] == f"job-{json.loads(answer['body'])['n']}"
        )
        seen[tags["requestId"]] = json.loads(answer["body"])["n"]
        sink.commit(frame.index)
        if len(seen) == len(sent):
            break
    watcher.close()
    assert seen == sent  # each item answered once, and its tags came with it
    _wait(lambda: int(sink.attributes()["stream.length"]) == 0)  # committed: gone
    assert int(inputs.attributes()["stream.length"]) == 0


def test_an_instance_works_on_its_window_at_once_and_no_more(stack):
    inputs, sink = _queues(stack)
    for i in range(10):
        inputs.put(json.dumps({"n": i, "hold": 0.4}).encode())
    _wait(lambda: len(_sink_items()) == 10)
    answers = [json.loads(bytes(item.data)) for item in _sink_items()]
    assert max(a["most_at_once"] for a in answers) == 2  # the window, and it was used
    assert {a["pid"] for a in answers} == {e.process.pid for e in stack["engines"]}


def test_get_search_delete_truncate_and_attributes(stack):
    inputs, sink = _queues(stack)
    index, request_id = sink.put(b"abc")  # as EAS's SDK tests do: straight into the sink
    found = sink.get(request_id=request_id, auto_delete=False)
    assert [f.data for f in found] == [b"abc"]
    assert [f.data for f in sink.get(index=index)] == [b"abc"]  # and, by default, deleted
    assert sink.get(index=index, timeout="0s") == []
    for _ in range(3):
        last, _ = sink.put(b"more")
    assert int(sink.attributes()["stream.lastEntry"]) == int(last)
    sink.delete(int(last))
    assert int(sink.attributes()["stream.length"]) == 2
    sink.truncate(int(last) + 1)
    assert int(sink.attributes()["stream.length"]) == 0
    gateway = stack["gateway"].address
    headers = {"Authorization": stack["token"]}
    # Not ready yet: 204, as EAS answers a request id with no result.
    assert (
        httpx.get(
            f"http://{gateway}/api/predict/sd/sink?requestId=nope", headers=headers
        ).status_code
        == 204
    )
    held, _ = inputs.put(json.dumps({"hold": 5}).encode(), tags={"first": "1"})
    _wait(lambda: inputs.search(int(held)).get("IsPending") is True)  # an instance has it
    bad = httpx.get(f"http://{gateway}/api/predict/sd?_index_=x", headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "_index_"


def test_callers_the_service_does_not_admit_are_refused(stack, api, live_server):
    gateway = stack["gateway"].address
    answer = httpx.post(
        f"http://{gateway}/api/predict/sd",
        content=b"{}",
        headers={"Authorization": "wsk-not-a-token-0000000000"},
    )
    assert answer.status_code == 401
    plain = {**SPEC, "metadata": {"name": "other", "instance": 1}}
    plain.pop("queue")
    assert api.post("/api/v1/services", plain, format="json").status_code == 201
    other = api.post("/api/v1/keys", {"name": "elsewhere", "services": ["other"]}, format="json")
    assert other.status_code == 201, other.json()
    publish_snapshot(force=True)
    _wait(
        lambda: (
            httpx.post(
                f"http://{gateway}/api/predict/sd",
                content=b"{}",
                headers={"Authorization": other.json()["key"]},
            ).status_code
            == 403
        )
    )
    # The control plane's queue routes take the gateways' plane key only.
    for key in ("", "not-the-plane-key"):
        direct = httpx.post(
            f"{live_server.url}/internal/queues/sd/input",
            content=b"{}",
            headers={"x-wharf-plane-key": key},
        )
        assert direct.status_code == 403
    assert QueueItem.objects.count() == 0
    # A put reaches only what a call in EAS form may: no engine's administrative route (the
    # feeder calls the instance with the engine's key); an item for a path goes to that path.
    token = {"Authorization": stack["token"]}
    admin = httpx.post(f"http://{gateway}/api/predict/sd/v1/load_lora_adapter", content=b"{}",
                       headers=token)  # fmt: skip
    assert admin.status_code == 404 and QueueItem.objects.count() == 0
    put = httpx.post(f"http://{gateway}/api/predict/sd/sdapi/v1/txt2img?task_id=t1",
                     content=b"{}", headers=token)  # fmt: skip
    assert put.status_code == 200, put.text
    _wait(lambda: len(_sink_items()) == 1)
    (answer,) = _sink_items()
    assert json.loads(bytes(answer.data))["path"] == "/sdapi/v1/txt2img"
    assert answer.tags["task_id"] == "t1"


def test_an_item_whose_instance_is_killed_goes_to_another(stack):
    inputs, _ = _queues(stack)
    _, request_id = inputs.put(json.dumps({"hold": 3}).encode())
    _wait(lambda: QueueItem.objects.filter(request_id=request_id, state="working").exists())
    holder = QueueItem.objects.get(request_id=request_id).instance
    doomed = stack["engines"][int(holder.rsplit("-", 1)[1])]
    doomed.kill()
    _wait(lambda: len(_sink_items()) == 1)
    (answer,) = _sink_items()
    assert answer.tags["lastCode"] == "200" and answer.tags["deliveries"] == "2"
    assert json.loads(bytes(answer.data))["pid"] != doomed.process.pid
    counted = [
        'wharf_gateway_queue_items_total{outcome="given_back",service="sd"} 1.0',
        'wharf_gateway_queue_items_total{outcome="answered",service="sd"} 1.0',
        'wharf_gateway_queue_item_seconds_count{service="sd"} 1.0',
    ]

    def metrics() -> str:
        return httpx.get(f"http://{stack['gateway'].address}/metrics",
                         headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text  # fmt: skip

    # The feeder counts an item once the store has taken its answer, so the sink may show it
    # a moment before the metrics do (seen on a loaded machine).
    _wait(lambda: all(line in metrics() for line in counted), timeout=10)


def test_with_max_delivery_spent_the_sink_holds_the_failure(stack, api):
    answer = api.put("/api/v1/services/sd", {**SPEC, "queue": {"max_delivery": 1}}, format="json")
    assert answer.status_code == 200, answer.json()
    inputs, sink = _queues(stack)
    _, request_id = inputs.put(json.dumps({"hold": 3}).encode())
    _wait(lambda: QueueItem.objects.filter(request_id=request_id, state="working").exists())
    holder = QueueItem.objects.get(request_id=request_id).instance
    stack["engines"][int(holder.rsplit("-", 1)[1])].kill()
    _wait(lambda: len(_sink_items()) == 1)
    (failed,) = sink.get(request_id=request_id)
    assert failed.tags["lastCode"] == "502" and "failed" in failed.tags["lastMessage"]


def test_a_gateway_killed_mid_item_loses_nothing(stack, live_server, redis_url, settings, tmp_path):
    inputs, _ = _queues(stack)
    _, request_id = inputs.put(json.dumps({"hold": 4}).encode())
    _wait(lambda: QueueItem.objects.filter(request_id=request_id, state="working").exists())
    stack["gateway"].process.send_signal(signal.SIGKILL)
    stack["gateway"].process.wait(10)
    other = _gateway(live_server, redis_url, settings, tmp_path, "other")
    stack["extra"].append(other)
    _wait(lambda: len(_sink_items()) == 1, timeout=40)
    (answer,) = _sink_items()
    assert answer.tags["lastCode"] == "200"
    assert answer.tags["deliveries"] == "2"  # handed out again after the lease lapsed


def test_the_cli_puts_an_item_gets_its_answer_and_shows_the_queue(
    stack, settings, live_server, tmp_path
):
    settings.WHARF_GATEWAY_URL = f"http://{stack['gateway'].address}"
    alice = get_user_model().objects.get(username="alice")
    env = {"WHARF_API": live_server.url, "WHARF_TOKEN": ApiToken.issue(alice, member(alice), "cli"),
           "WHARF_CONFIG_DIR": str(tmp_path / "wharf")}  # fmt: skip
    token = ["--token", stack["token"]]

    def wharf(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["queue", *args], env=env)
        return result.exit_code, result.output

    code, out = wharf("put", "sd", '{"n": 7}', "--tag", "job=cli", *token, "-o", "json")
    assert code == 0, out
    request_id = json.loads(out)["request_id"]
    code, out = wharf("get", "sd", request_id, "--wait", "20", *token, "-o", "json")
    assert code == 0, out
    answer = json.loads(out)
    assert answer["status"] == "200" and answer["tags"]["job"] == "cli"
    assert json.loads(json.loads(answer["data"])["body"]) == {"n": 7}
    code, out = wharf("show", "sd", "-o", "json")
    assert code == 0 and json.loads(out)["sink"]["length"] == 1, out  # kept: no --take
    code, out = wharf("get", "sd", "no-such-id", *token)
    assert code == 4 and "no answer" in out
