"""Canary releases end to end in the control plane: the API starts one, the scheduler runs the
new version beside the stable one on in-memory runtimes (real database and Redis), the canary
controller (workers.scheduling.canaries) judges the gateways' figures of both sides, written to
Redis as gateways write them (contracts.call_figures), and promotes or rolls back; the gateways'
weight comes from the published snapshot."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from contracts.call_figures import PREFIX, Figures, key, slot
from contracts.canary import CANARY_TRACK
from controlplane.audit.models import AuditEntry
from controlplane.services.models import Canary, Service
from tests.api_support import published
from tests.test_fleet import custom, deploy
from workers.scheduling import canaries

pytestmark = pytest.mark.django_db


@pytest.fixture
def advance_all(django_capture_on_commit_callbacks):
    """A pass of the canary controller, its on-commit work (publishing) done as it would be."""

    def run(now):
        with django_capture_on_commit_callbacks(execute=True):
            return canaries.advance_all(now)

    return run


QUICK = {"steps": [10, 50, 100], "interval_s": 10, "min_requests": 20}


@pytest.fixture
def web(fleet_store, api):
    """web: two instances of version 1 serving on node a."""
    fleet, store = fleet_store
    fleet.node("a")
    deploy(custom("web", instances=2))
    fleet.settle()
    return fleet, store


@pytest.fixture
def fleet_store(store, settings, redis_url):
    from tests.fleet_support import Fleet

    settings.REDIS_URL = redis_url
    for found in store.scan_iter(f"{PREFIX}web:*"):
        store.delete(found)
    return Fleet(), store


def version_two() -> dict:
    spec = custom("web", instances=2)
    spec["containers"][0]["env"] = [{"name": "V", "value": "2"}]
    return spec


def measured(store, at, track: str, calls: int, errors: int = 0, ttft: float = 100) -> None:
    """What the gateways would have counted of `calls` calls on `track` in `at`'s slot."""
    figures = Figures()
    for index in range(calls):
        figures.add(500 if index < errors else 200, False, ttft, 20)
    for field, amount in figures.fields().items():
        store.hincrby(key("web", track, slot(at.timestamp())), field, amount)


def tracks() -> list[tuple[str, str]]:
    return sorted((r.track, r.state) for r in Service.objects.get(name="web").instances.all())


def start(api, **extra):
    response = api.post("/api/v1/services/web/canary", {"spec": version_two(), **QUICK, **extra},
                        format="json")  # fmt: skip
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_healthy_canary_goes_step_by_step_and_is_promoted(web, api, advance_all):
    fleet, store = web
    assert start(api)["state"] == "starting"
    fleet.settle()
    assert tracks() == [("", "ready")] * 2 + [(CANARY_TRACK, "ready")] * 2
    assert published(store).services["web"].canary_weight == 0  # not before it runs
    now = timezone.now()
    advance_all(now)
    release = Canary.objects.get()
    assert (release.state, release.weight) == ("running", 10)
    assert published(store).services["web"].canary_weight == 10
    canary_urls = {i.url for i in published(store).services["web"].instances
                   if i.track == CANARY_TRACK}  # fmt: skip
    assert len(canary_urls) == 2

    measured(store, now, CANARY_TRACK, 30)
    measured(store, now, "", 270)
    advance_all(now + timedelta(seconds=5))  # within bounds, but the interval runs on
    assert Canary.objects.get().step == 0 and "measuring" in Canary.objects.get().message
    advance_all(now + timedelta(seconds=11))
    assert Canary.objects.get().weight == 50
    assert published(store).services["web"].canary_weight == 50

    later = now + timedelta(seconds=30)
    measured(store, later, CANARY_TRACK, 40)
    measured(store, later, "", 40)
    advance_all(later)
    release = Canary.objects.get()
    assert release.state == "promoted" and "within bounds at 50%" in release.message
    service = Service.objects.get(name="web")
    assert service.spec == version_two() and service.versions.first().note == "canary promoted"
    fleet.settle()
    assert tracks() == [("", "ready")] * 2  # the canary's instances serve; the old are gone
    assert {r.spec_hash for r in service.instances.all()} == {release.spec_hash}
    assert published(store).services["web"].canary_weight == 0
    reasons = list(service.events.order_by("id").values_list("reason", flat=True))
    canary_reasons = [r for r in reasons if r.startswith("Canary")]
    assert canary_reasons == ["CanaryStarted", "CanaryStep", "CanaryStep", "CanaryPromoted"]
    assert AuditEntry.objects.filter(via="canary", service="web").count() == 4


def test_a_canary_that_fails_calls_is_rolled_back_at_once(web, api, advance_all):
    fleet, store = web
    start(api)
    fleet.settle()
    now = timezone.now()
    advance_all(now)
    measured(store, now, CANARY_TRACK, 10, errors=2)  # 20 %: the bound broken already
    measured(store, now, "", 90)
    advance_all(now + timedelta(seconds=2))
    release = Canary.objects.get()
    assert release.state == "rolled_back" and "error rate 2/10" in release.message
    assert published(store).services["web"].canary_weight == 0
    fleet.settle()
    assert tracks() == [("", "ready")] * 2  # the canary's instances drained and removed
    service = Service.objects.get(name="web")
    assert service.spec == custom("web", instances=2)  # the previous version serves on
    event = service.events.get(reason="CanaryRolledBack")
    assert "error rate 2/10 = 20.0% > 1.0%" in event.message


def test_a_slow_canary_is_rolled_back_naming_the_figures(web, api, advance_all):
    fleet, store = web
    start(api)
    fleet.settle()
    now = timezone.now()
    advance_all(now)
    measured(store, now, CANARY_TRACK, 25, ttft=300)  # 3x the stable TTFT
    measured(store, now, "", 200, ttft=100)
    advance_all(now + timedelta(seconds=3))
    assert "TTFT p50 300 ms vs stable 100 ms" in Canary.objects.get().message
    assert Canary.objects.get().state == "rolled_back"


def test_hand_controls(web, api, advance_all):
    fleet, store = web
    start(api)
    again = api.post("/api/v1/services/web/canary", {"spec": version_two()}, format="json")
    assert again.status_code == 409
    fleet.settle()
    advance_all(timezone.now())
    assert api.post("/api/v1/services/web/canary/pause").json()["state"] == "paused"
    advance_all(timezone.now() + timedelta(seconds=60))  # paused: not judged
    assert Canary.objects.get().state == "paused"
    resumed = api.post("/api/v1/services/web/canary/resume").json()
    assert resumed["state"] == "running" and resumed["weight"] == 10
    assert api.post("/api/v1/services/web/canary/rewind").status_code == 404
    aborted = api.post("/api/v1/services/web/canary/abort").json()
    assert aborted["state"] == "aborted" and aborted["weight"] == 0
    assert api.post("/api/v1/services/web/canary/abort").status_code == 404  # none active
    assert api.get("/api/v1/services/web/canary").json()["state"] == "aborted"
    fleet.settle()
    assert tracks() == [("", "ready")] * 2
    # promote by hand
    start(api)
    fleet.settle()
    promoted = api.post("/api/v1/services/web/canary/promote").json()
    assert promoted["state"] == "promoted"
    assert Service.objects.get(name="web").spec == version_two()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"spec": custom("web", instances=2)}, "spec"),  # the service's own: nothing to release
        ({"spec": {**version_two(), "name": "other"}}, "spec.name"),
        ({"spec": {**version_two(), "metadata": {"instance": -1}}}, "spec.metadata.instance"),
        ({"spec": version_two(), "steps": [50, 10, 100]}, "steps"),
        ({"spec": version_two(), "steps": [10, 50]}, "steps"),
        ({"spec": version_two(), "interval_s": 1}, "interval_s"),
        ({"spec": version_two(), "max_error_rate": 2}, "max_error_rate"),
        ({"spec": version_two(), "colour": "red"}, "colour"),
        ({"steps": [100]}, "spec"),
        (
            {"spec": {**version_two(), "metadata": {"instance": 2, "workload_type": "elasticjob"}}},
            "spec.metadata.workload_type",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_starts_nothing(web, api, body, field):
    response = api.post("/api/v1/services/web/canary", body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"], response.json()
    assert not Canary.objects.exists()
