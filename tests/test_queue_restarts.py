"""Nothing accepted is lost and nothing is answered twice when every Wharf process an Async
service's queue goes through is killed with -9 mid-queue: the API (a real uvicorn process on the
test database) and the gateway (a real process), then both started again. The engines keep
running, as on a node whose Wharf processes restart."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings
from django.db import connection

from contracts.eas import normalise
from controlplane.queues.models import QueueItem
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_snapshot
from controlplane.tokens.models import ServiceToken
from tests.api_support import default_workspace
from tests.live_api import LiveApi
from tests.test_async_queues import SPEC, _Engine, _wait
from tests.test_eas_sdk import _GatewayProcess

ROOT = Path(__file__).resolve().parents[1]
ITEMS = 6
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="processes share the database"),
    pytest.mark.timeout(180),
]


def _gateway(api: LiveApi, redis_url: str, log: Path) -> _GatewayProcess:
    os.environ.update(WHARF_API_URL=api.url, WHARF_GATEWAY_QUEUE_LEASE="3")
    try:
        return _GatewayProcess(redis_url, django_settings.WHARF_TOKEN_KEY, log)
    finally:
        del os.environ["WHARF_API_URL"], os.environ["WHARF_GATEWAY_QUEUE_LEASE"]


def test_killing_the_api_and_the_gateway_mid_queue_loses_nothing(store, redis_url, tmp_path):
    engines = [_Engine(), _Engine()]
    spec = normalise(SPEC)  # as the API stores it
    service = Service.objects.create(name="sd", spec=spec, workspace=default_workspace())
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
    token = ServiceToken.issue(service)
    publish_snapshot(force=True)
    apis, gateways = [LiveApi(redis_url, tmp_path)], []
    try:
        gateways.append(_gateway(apis[0], redis_url, tmp_path / "gateway-1.log"))
        url = f"http://{gateways[0].address}/api/predict/sd"
        _wait(
            lambda: (
                httpx.get(f"{url}?_attrs_=true", headers={"Authorization": token}).status_code
                == 200
            )
        )
        sent = set()
        for n in range(ITEMS):
            answer = httpx.post(
                url,
                content=json.dumps({"n": n, "hold": 2}).encode(),
                headers={"Authorization": token},
                timeout=10,
            )
            assert answer.status_code == 200, answer.text
            sent.add(answer.headers["x-eas-queueservice-request-id"])
        _wait(lambda: QueueItem.objects.filter(state="working").count() == 4)  # 2 windows of 2
        apis[0].kill()  # the gateway cannot record the answers it gets now
        gateways[0].process.send_signal(signal.SIGKILL)
        gateways[0].process.wait(10)
        apis.append(LiveApi(redis_url, tmp_path))
        gateways.append(_gateway(apis[1], redis_url, tmp_path / "gateway-2.log"))
        _wait(lambda: QueueItem.objects.filter(queue="sink").count() == ITEMS, timeout=90)
        answers = list(QueueItem.objects.filter(queue="sink"))
        assert {a.request_id for a in answers} == sent  # each one answered, once
        assert {a.tags["lastCode"] for a in answers} == {"200"}
        # Those in work when both died went again once their lease lapsed.
        assert "2" in {a.tags["deliveries"] for a in answers}
        assert not QueueItem.objects.filter(queue="input").exists()
    finally:
        for gateway in gateways[1:]:
            gateway.stop()
        for api in apis:
            if api.process.poll() is None:
                api.kill()
        for engine in engines:
            engine.kill()
