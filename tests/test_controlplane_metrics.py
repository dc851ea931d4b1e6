"""The API's own /metrics (controlplane.metrics.exposition): closed without the operator's
token, and with it the figures deploy/prometheus/alerts.yaml alerts on, read from the database
at scrape time; and the API's probes /healthz and /readyz."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from types import SimpleNamespace

import pytest
import redis
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from contracts.spec import parse_spec
from contracts.usage import USAGE_PREFIX, flushing_key, usage_field, usage_key
from controlplane.metrics import exposition, usage_backlog
from controlplane.metrics.figures import (
    node_states,
    quota_figures,
    service_figures,
    unflushed_age,
)
from controlplane.nodes.models import Node
from controlplane.queues import store as queue_store
from controlplane.queues.models import QueueItem
from controlplane.services.choices import DesiredState, Phase
from controlplane.services.models import Service
from controlplane.usage.flush import flush_usage
from controlplane.usage.models import UsageRecord
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.quotas import Footprint, Quotas
from tests.api_support import default_workspace
from workers.scheduling import planning

TOKEN = "scrape-token-6b1f0c"
BACKLOG = "wharf_usage_unflushed_age_seconds"
NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens there
CHAT = {"name": "chat", "metadata": {"instance": 3, "gpu": 1},
        "llm": {"engine": "vllm", "model": "qwen"}}  # fmt: skip
PD = {"name": "pd", "llm": {"engine": "vllm", "model": "qwen", "pd": {
    "prefill": {"instance": 1, "gpu": 1}, "decode": {"instance": 2, "gpu": 1}}}}  # fmt: skip


@pytest.fixture(autouse=True)
def usage_store(settings, redis_url):
    """The Redis the page reads the usage backlog from (the test's own), with no usage keys."""
    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    _clear_usage(client)
    yield client
    _clear_usage(client)
    client.close()


def _clear_usage(client: redis.Redis) -> None:
    for key in client.scan_iter(match=f"{USAGE_PREFIX}*"):
        client.delete(key)


def samples(text: str) -> dict[tuple, float]:
    """{(name, sorted label items): value} of an exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(settings, token: str | None = TOKEN) -> dict[tuple, float]:
    settings.WHARF_API_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content.decode())


# ---- pure ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "running", "autoscale", "progress", "desired", "paused"), [
    (CHAT, True, {}, "3/3 ready", 3, False),
    (CHAT, False, {}, "stopped", 0, False),
    (PD, True, {}, "prefill 1/1, decode 1/2; rollout paused: decode-1 exited", 3, True),
    (None, True, {}, "", 0, False),  # a spec stored before a rule tightened runs nothing
])  # fmt: skip
def test_service_figures_want_the_specs_instances_while_running(
    data, running, autoscale, progress, desired, paused
):
    spec = parse_spec(data) if data else None
    figures = service_figures("ws", "svc", spec, running, autoscale, 1, progress)
    assert (figures.desired, figures.ready, figures.rollout_paused) == (desired, 1, paused)


def test_a_paused_rollout_is_read_from_the_progress_the_reconciler_writes():
    """The mark is the scheduler's words (workers.scheduling.planning.status), which the control
    plane may not import: the two are kept equal here."""
    paused = planning.status("running", {"": 2}, {"": 0}, 3, "updating", failed=False,
                             updating=True, paused="chat-3 exited", previous=2)  # fmt: skip
    moving = planning.status("running", {"": 2}, {"": 1}, 3, "updating", failed=False,
                             updating=True, previous=1)  # fmt: skip
    for progress, expected in ((paused.progress, True), (moving.progress, False)):
        figures = service_figures("ws", "chat", parse_spec(CHAT), True, {}, 2, progress)
        assert figures.rollout_paused is expected, progress


def test_a_node_state_is_one_of_a_state_set():
    assert node_states("not_ready") == {"ready": 0, "not_ready": 1, "cordoned": 0, "draining": 0}


def test_quota_figures_only_for_resources_with_a_quota():
    held = Footprint(services=2, instances=5, cards=Counter(gpu=4, npu=2))
    figures = quota_figures("team", Quotas(services=None, instances=8, cards={"gpu": 4}), held)
    assert [(f.resource, f.used, f.limit) for f in figures] == [
        ("instances", 5, 8), ("cards.gpu", 4, 4),
    ]  # fmt: skip
    queued = quota_figures("team", Quotas(), Footprint(), queued=(100, 7))
    assert [(f.resource, f.used, f.limit) for f in queued] == [("queued_items", 7, 100)]


MINUTE = 29_000_000  # an epoch minute in 2025


@pytest.mark.parametrize(("minutes", "now", "age"), [
    ([], MINUTE * 60 + 30, 0.0),  # nothing in Redis
    ([MINUTE], MINUTE * 60 + 30, 0.0),  # only the current minute: it still grows
    ([MINUTE - 1, MINUTE], MINUTE * 60 + 10, 10.0),  # just over, the flush due any second
    ([MINUTE, MINUTE - 7, MINUTE - 2], MINUTE * 60 + 5, 365.0),  # the oldest counts
    ([MINUTE + 1], MINUTE * 60 + 59, 0.0),  # a gateway's clock ahead: not waiting yet
])  # fmt: skip
def test_the_usage_backlog_is_the_time_since_the_oldest_finished_minute_ended(minutes, now, age):
    assert unflushed_age(minutes, now) == age


# ---- the page, against the database ---------------------------------------------------------


@pytest.mark.django_db
def test_metrics_are_closed_without_a_configured_token(settings):
    settings.WHARF_API_METRICS_TOKEN = ""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 403
    assert "WHARF_API_METRICS_TOKEN" in response.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("authorization", [None, f"Token {TOKEN}", "Bearer wrong", "Bearer "])
def test_metrics_refuse_a_missing_or_wrong_token(settings, authorization):
    settings.WHARF_API_METRICS_TOKEN = TOKEN
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = Client().get("/metrics", **headers)
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"


@pytest.mark.django_db
def test_metrics_show_ready_against_desired_instances_and_a_paused_rollout(settings):
    team = Workspace.objects.create(name="team")
    Service.objects.create(workspace=default_workspace(), name="chat", spec=CHAT,
                           ready_instances=1, phase=Phase.DEGRADED)  # fmt: skip
    paused = "prefill 1/1, decode 2/2; rollout paused: decode-3 exited"
    Service.objects.create(workspace=team, name="pd", spec=PD, ready_instances=3,
                           phase=Phase.UPDATING, progress=paused)  # fmt: skip
    Service.objects.create(workspace=team, name="idle", spec={**CHAT, "name": "idle"},
                           desired_state=DesiredState.STOPPED)  # fmt: skip
    Service.objects.create(workspace=team, name="gone", spec={**CHAT, "name": "gone"},
                           desired_state=DesiredState.DELETED)  # fmt: skip
    found = scrape(settings)
    for workspace, service, desired, ready, paused in [
        ("default", "chat", 3, 1, 0), ("team", "pd", 3, 3, 1), ("team", "idle", 0, 0, 0),
    ]:  # fmt: skip
        labels = (("service", service), ("workspace", workspace))
        assert found[("wharf_service_instances_desired", labels)] == desired
        assert found[("wharf_service_instances_ready", labels)] == ready
        assert found[("wharf_service_rollout_paused", labels)] == paused
    assert not [key for key in found if ("service", "gone") in key[1]]


@pytest.mark.django_db
def test_metrics_show_each_async_services_queues(settings):
    settings.WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE = 50
    spec = {"name": "sd", "metadata": {"type": "Async", "rpc": {"worker_threads": 1}},
            "containers": [{"image": "i", "command": "serve", "port": 8000}]}  # fmt: skip
    sd = Service.objects.create(workspace=default_workspace(), name="sd", spec=spec)
    Service.objects.create(workspace=default_workspace(), name="quiet",
                           spec={**spec, "name": "quiet"})  # fmt: skip
    queue = queue_store.queue_of(sd, "input")
    first = queue_store.put(queue, b"1", tags={})
    queue_store.put(queue, b"2", tags={})
    queue_store.lease(sd, "gw", ["sd-0"], 30)
    QueueItem.objects.filter(queue="input", state="pending").update(
        created_at=timezone.now() - timedelta(seconds=90))  # fmt: skip
    queue_store.finish(first.id, "gw", 200, b"ok", "")
    found = scrape(settings)

    def items(service: str, queue: str, state: str) -> float:
        labels = (("queue", queue), ("service", service), ("state", state),
                  ("workspace", "default"))  # fmt: skip
        return found[("wharf_queue_items", labels)]

    assert (items("sd", "input", "pending"), items("sd", "input", "working"),
            items("sd", "sink", "pending")) == (1, 0, 1)  # fmt: skip
    assert items("quiet", "input", "pending") == 0  # every Async service, items or not
    oldest = found[("wharf_queue_oldest_pending_seconds",
                    (("service", "sd"), ("workspace", "default")))]  # fmt: skip
    assert 89 <= oldest <= 120
    assert not [key for key in found if key[0] == "wharf_queue_items" and
                ("service", "chat") in key[1]]  # fmt: skip
    # The workspace's queued items (its input queues) against the platform's bound.
    quota = (("resource", "queued_items"), ("workspace", "default"))
    assert (found[("wharf_quota_used", quota)], found[("wharf_quota_limit", quota)]) == (1, 50)


@pytest.mark.django_db
def test_metrics_show_each_nodes_state(settings):
    now = timezone.now()
    Node.objects.create(name="gpu-1", address="10.0.0.1", heartbeat_at=now)
    Node.objects.create(name="gpu-2", address="10.0.0.2", heartbeat_at=now - timedelta(hours=1))
    Node.objects.create(name="gpu-3", address="10.0.0.3", heartbeat_at=now, cordoned=True)
    found = scrape(settings)
    current = {
        labels[0][1]: labels[1][1]
        for (name, labels), value in found.items()
        if name == "wharf_node_state" and value == 1
    }
    assert current == {"gpu-1": "ready", "gpu-2": "not_ready", "gpu-3": "cordoned"}
    assert sum(1 for name, _ in found if name == "wharf_node_state") == 3 * 4


@pytest.mark.django_db
def test_metrics_show_quota_used_against_limit_within_the_ceiling(settings):
    settings.WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE = 0  # no platform bound on queued items
    team = Workspace.objects.create(name="team", quota_instances=10, quota_cards={"gpu": 8},
                                    ceiling_cards={"gpu": 6})  # fmt: skip
    Workspace.objects.create(name="free")  # no quota: no series
    Service.objects.create(workspace=team, name="chat", spec=CHAT)
    Service.objects.create(workspace=team, name="pd", spec=PD)
    Service.objects.create(workspace=team, name="idle", spec={**CHAT, "name": "idle"},
                           desired_state=DesiredState.STOPPED)  # fmt: skip
    found = scrape(settings)
    quota = {
        (name, dict(labels)["resource"]): value
        for (name, labels), value in found.items()
        if name.startswith("wharf_quota_")
    }
    assert quota == {
        ("wharf_quota_used", "instances"): 6, ("wharf_quota_limit", "instances"): 10,
        ("wharf_quota_used", "cards.gpu"): 6, ("wharf_quota_limit", "cards.gpu"): 6,
    }  # fmt: skip
    assert all(dict(labels)["workspace"] == "team" for (name, labels) in found
               if name.startswith("wharf_quota_"))  # fmt: skip


# ---- the usage backlog, against Redis -------------------------------------------------------


def gateway_counts(client: redis.Redis, at: float, key: str | None = None) -> None:
    """What a gateway's usage pipeline sends for one call at `at` (gateway.observe.usage)."""
    key = key or usage_key(at)
    for kind, amount in (("requests", 1), ("prompt", 12), ("completion", 30)):
        client.hincrby(key, usage_field("chat", "k1", kind), amount)


@pytest.mark.django_db
def test_metrics_show_how_long_usage_has_waited_in_redis_until_the_flush_takes_it(
    settings, usage_store, monkeypatch
):
    now = MINUTE * 60 + 20.0  # the page's clock, held still (a minute may end mid-test)
    monkeypatch.setattr(exposition, "time", SimpleNamespace(time=lambda: now))
    assert scrape(settings)[(BACKLOG, ())] == 0  # nothing counted yet
    gateway_counts(usage_store, now)  # the current minute: not due yet
    assert scrape(settings)[(BACKLOG, ())] == 0
    gateway_counts(usage_store, now - 180)  # a minute the workers have not flushed
    assert scrape(settings)[(BACKLOG, ())] == 140  # ended 2 min 20 s ago
    # A minute a crashed pass claimed and never wrote waits as much as an unclaimed one.
    gateway_counts(usage_store, 0, key=flushing_key(usage_key(now - 600)))
    assert scrape(settings)[(BACKLOG, ())] == 560

    assert flush_usage(usage_store, now) == 2
    assert scrape(settings)[(BACKLOG, ())] == 0
    assert UsageRecord.objects.filter(service="chat", key_id="k1").count() == 2
    assert usage_store.exists(usage_key(now))  # the current minute stays for a later pass


def test_the_usage_backlog_reads_key_names_in_a_bounded_number_of_scans(usage_store, monkeypatch):
    others = [f"flushalert-test:{i}" for i in range(60)]  # a Redis busy with other keys
    usage_store.mset(dict.fromkeys(others, 1))
    usage_store.hset(f"{USAGE_PREFIX}not-a-minute", "x", 1)  # ignored, as the flush does
    gateway_counts(usage_store, MINUTE * 60)
    calls = []
    scan = usage_store.scan
    monkeypatch.setattr(usage_store, "scan", lambda *a, **kw: calls.append(1) or scan(*a, **kw))
    try:
        assert usage_backlog.waiting_minutes(usage_store) == [MINUTE]  # every key read
        monkeypatch.setattr(usage_backlog, "SCAN_BATCH", 2)
        monkeypatch.setattr(usage_backlog, "SCAN_CALLS", 3)
        calls.clear()
        assert set(usage_backlog.waiting_minutes(usage_store) or ()) <= {MINUTE}  # in part
        assert len(calls) == 3  # 62 keys, 2 at a time: stopped at the bound
    finally:
        usage_store.delete(*others)


@pytest.mark.django_db
def test_metrics_have_no_usage_backlog_sample_while_redis_does_not_answer(settings):
    settings.REDIS_URL = NOWHERE
    settings.WHARF_API_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200  # the database's figures still come
    text = response.content.decode()
    assert f"# HELP {BACKLOG} " in text
    assert not [key for key in samples(text) if key[0] == BACKLOG]


# ---- probes ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_healthz_answers_while_the_process_serves(settings):
    settings.REDIS_URL = NOWHERE  # nothing there: liveness does not care
    response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_ready_when_the_database_and_redis_answer(settings, redis_url):
    settings.REDIS_URL = redis_url
    response = Client().get("/readyz")
    assert response.status_code == 200 and response.json() == {"status": "ready"}


@pytest.mark.django_db
def test_readyz_names_redis_when_it_does_not_answer(settings):
    settings.REDIS_URL = NOWHERE
    response = Client().get("/readyz")
    assert response.status_code == 503
    (reason,) = response.json()["reasons"]
    assert reason.startswith("redis: ")


@pytest.mark.django_db
def test_probes_and_scrapes_by_pod_ip_pass_the_allowed_hosts_check(settings, redis_url):
    """The kubelet and Prometheus call the pod's IP, in no WHARF_ALLOWED_HOSTS; the rest of the
    API still refuses that host."""
    settings.ALLOWED_HOSTS = ["wharf.example.com"]
    settings.REDIS_URL = redis_url
    settings.WHARF_API_METRICS_TOKEN = TOKEN
    pod = Client(HTTP_HOST="10.244.1.17:8000")
    assert pod.get("/healthz").status_code == 200
    assert pod.get("/readyz").status_code == 200
    assert pod.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert pod.get("/api/v1/services").status_code == 400  # DisallowedHost
    assert pod.post("/readyz").status_code == 405
