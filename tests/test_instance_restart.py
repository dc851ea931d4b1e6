"""Restarting one instance (EAS's DeleteServiceInstances, eascmd `dw`): through the v1 API and
EAS's own SDK, with the scheduler and node agents (in-memory runtimes) and the real database:
the instance drains and a new one takes its place; who may, and what is refused."""

from __future__ import annotations

import pytest
from alibabacloud_eas20210701 import models as eas

from controlplane.services.models import Event, Instance, Service
from tests.api_support import client_for
from tests.eas_openapi_support import REGION, key_pair, refusal, sdk
from tests.fleet_support import Fleet
from tests.test_eas_openapi import broker  # noqa: F401 (a fixture)
from tests.test_fleet import custom, deploy


@pytest.fixture
def fleet(store) -> Fleet:
    fleet = Fleet()
    fleet.node("a")
    deploy(custom("web", instances=2))
    fleet.settle()
    return fleet


@pytest.mark.django_db
def test_a_deleted_instance_drains_and_a_new_one_takes_its_place(api, fleet):
    first, second = [r.name for r in fleet.rows("web")]
    answer = api.delete(f"/api/v1/services/web/instances/{first}")
    assert answer.status_code == 202, answer.json()
    assert answer.json()["state"] == "draining"
    assert api.delete(f"/api/v1/services/web/instances/{first}").status_code == 202  # idempotent
    fleet.settle()
    rows = fleet.rows("web")
    names = {r.name for r in rows}
    assert len(rows) == 2 and first not in names and second in names
    assert all(r.state == "ready" for r in rows)
    event = Event.objects.get(service__name="web", reason="InstanceDeleteRequested")
    assert event.instance == first and "deleted by alice" in event.message


@pytest.mark.django_db
def test_what_may_not_be_deleted_is_refused(api, fleet):
    missing = api.delete("/api/v1/services/web/instances/web-nothere")
    assert missing.status_code == 404 and "web-nothere" in missing.json()["detail"]
    first = fleet.rows("web")[0].name
    viewer = client_for("vera", role="viewer")
    assert viewer.delete(f"/api/v1/services/web/instances/{first}").status_code == 403
    stranger = client_for("sam", workspace="other")
    assert stranger.delete(f"/api/v1/services/web/instances/{first}").status_code == 404
    Instance.objects.filter(name=first).update(runtime="kubernetes")  # a pod the cluster keeps
    pod = api.delete(f"/api/v1/services/web/instances/{first}")
    assert pod.status_code == 409 and "kubectl delete pod" in pod.json()["detail"]
    assert Instance.objects.get(name=first).state == "ready"


@pytest.mark.django_db(transaction=True)
def test_eas_sdks_delete_service_instances_restarts_them(live_server, broker, store):  # noqa: F811
    fleet = Fleet()
    fleet.node("a")
    deploy(custom("web", instances=2))
    fleet.settle()
    key, secret = key_pair("alice")
    client = sdk(live_server.url, key.key_id, secret)
    names = [r.name for r in fleet.rows("web")]
    request = eas.DeleteServiceInstancesRequest(instance_list=",".join(names))
    body = client.delete_service_instances(REGION, "web", request).body
    assert body.request_id and "deleted successfully" in body.message
    fleet.settle()
    rows = fleet.rows("web")
    assert len(rows) == 2 and not {r.name for r in rows} & set(names)
    exc = refusal(lambda: client.delete_service_instances(
        REGION, "web", eas.DeleteServiceInstancesRequest(instance_list="web-nothere")))  # fmt: skip
    assert (exc.status_code, exc.code) == (404, "InvalidInstance.NotFound")
    assert Service.objects.get(name="web").instances.count() == 2
