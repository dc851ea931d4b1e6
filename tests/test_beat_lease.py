"""One beat leader: the lease decisions (pure, tables), the lease against real Redis, which
entries each beat sends, and what the API shows. Two real beat processes: test_beat_takeover."""

from __future__ import annotations

import json
import time

import pytest
import redis

from contracts import beat
from workers.beat import (
    BeatLease,
    check_due,
    leads,
    lease_client,
    next_check_in,
    node_local,
    slow_takeover,
)

LEASE = 8.0


@pytest.mark.parametrize(
    "options, local",
    [
        ({"queue": "wharf.node.gpu-1", "expires": 3600}, True),
        ({"queue": "celery"}, False),
        ({}, False),
        ({"queue": None}, False),
        ({"queue": "wharf.nodes"}, False),
    ],
)
def test_an_entry_routed_to_a_nodes_queue_is_that_hosts_own(options, local):
    assert node_local(options) is local


@pytest.mark.parametrize(
    "now, checked_at, due",
    [(100.0, None, True), (100.0, 99.0, False), (100.0, 98.0, True), (100.0, 90.0, True)],
)
def test_the_lease_is_tried_every_quarter_lease(now, checked_at, due):
    assert check_due(now, checked_at, LEASE) is due


@pytest.mark.parametrize(
    "now, confirmed_at, leading",
    [
        (100.0, None, False),  # never confirmed
        (100.0, 99.0, True),
        (100.0, 92.1, True),  # its TTL started after 92.1: still ours
        (100.0, 92.0, False),  # may have lapsed in Redis: stop sending
        (100.0, 50.0, False),
    ],
)
def test_a_beat_leads_only_while_its_last_confirmed_lease_lasts(now, confirmed_at, leading):
    assert leads(now, confirmed_at, LEASE) is leading


@pytest.mark.parametrize(
    "now, checked_at, wait", [(100.0, None, 0.0), (100.0, 99.0, 1.0), (100.0, 90.0, 0.0)]
)
def test_beat_wakes_for_the_next_try(now, checked_at, wait):
    assert next_check_in(now, checked_at, LEASE) == wait


@pytest.mark.parametrize(
    "lease, period, slow",
    [(8.0, 10.0, False), (1.6, 2.0, False), (9.0, 10.0, True), (30, 10, True)],
)
def test_a_lease_replaced_later_than_a_period_is_warned(lease, period, slow):
    warning = slow_takeover(lease, period)
    assert (warning is not None) is slow
    assert warning is None or "WHARF_BEAT_LEASE_S" in warning


@pytest.mark.parametrize(
    "previous, reason, before",
    [
        (None, beat.FIRST, None),
        ({}, beat.FIRST, None),
        ({"leader": "b", "since": "t0"}, beat.RESUMED, "b"),
        ({"leader": "a", "since": "t0"}, beat.TAKEOVER, "a"),
        ({"leader": "a", "since": "t0", "released_at": "t1"}, beat.HANDOVER, "a"),
    ],
)
def test_the_handover_event_says_why_the_lease_changed_hands(previous, reason, before):
    event = beat.handover(previous, "b", "t2")
    assert event == {"at": "t2", "leader": "b", "previous": before, "reason": reason}
    assert "b" in beat.describe(event)


@pytest.mark.parametrize(
    "token, node",
    [(None, None), (b"gpu-1/0a1b", "gpu-1"), ("a/b/c", "a/b"), (b"nonode", None)],
)
def test_the_lease_value_names_its_holder(token, node):
    assert beat.holder(token) == node


@pytest.fixture
def leases(redis_url):
    client = redis.Redis.from_url(redis_url)
    keys = (beat.LEASE_KEY, beat.TERM_KEY, beat.HANDOVERS_KEY)
    client.delete(*keys)
    yield client
    client.delete(*keys)


def test_one_beat_takes_the_lease_and_the_other_follows(leases):
    a, b = BeatLease(leases, "a", 5.0), BeatLease(leases, "b", 5.0)
    a.keep(100.0)
    b.keep(100.0)
    assert (a.leads(100.1), b.leads(100.1)) == (True, False)
    a.keep(102.0)  # a renewal, not a new term
    assert a.leads(106.0)
    shown = beat.leadership(leases)
    assert shown["leader"] == "a" and shown["since"]
    assert [event["reason"] for event in shown["handovers"]] == [beat.FIRST]


def test_a_lapsed_lease_is_taken_over_and_that_is_an_event(leases):
    a, b = BeatLease(leases, "a", 1.0), BeatLease(leases, "b", 1.0)
    a.keep(time.monotonic())
    time.sleep(1.2)  # a died: nobody renews
    b.keep(time.monotonic())
    assert b.leads(time.monotonic())
    a.keep(time.monotonic() + 10)  # a comes back: its renewal fails, b holds the lease
    assert not a.leads(time.monotonic() + 10)
    event = beat.leadership(leases)["handovers"][0]
    assert (event["leader"], event["previous"], event["reason"]) == ("b", "a", beat.TAKEOVER)


def test_a_lease_given_back_is_a_handover(leases):
    a, b = BeatLease(leases, "a", 30.0), BeatLease(leases, "b", 30.0)
    a.keep(100.0)
    a.release()
    assert beat.leadership(leases)["leader"] is None
    assert json.loads(leases.get(beat.TERM_KEY))["released_at"]
    b.keep(100.0)
    event = beat.leadership(leases)["handovers"][0]
    assert (event["leader"], event["reason"]) == ("b", beat.HANDOVER)


def test_a_beat_that_cannot_reach_redis_does_not_lead_and_does_not_stop(caplog):
    away = BeatLease(lease_client("redis://127.0.0.1:1/0", 4.0), "a", 4.0)
    started = time.monotonic()
    away.keep(100.0)
    assert time.monotonic() - started < 1.0  # a quarter lease at most, no retries
    assert not away.leads(100.1)
    assert "cannot reach Redis" in caplog.text


def test_a_follower_sends_its_hosts_entries_and_not_the_fleets(leases, tmp_path, monkeypatch):
    from celery.beat import Scheduler

    from workers.beat import LeaderScheduler
    from workers.celery import NODE_QUEUE, app

    sent: list[str] = []
    monkeypatch.setattr(Scheduler, "apply_async", lambda self, entry, **kw: sent.append(entry.name))
    leases.set(beat.LEASE_KEY, "elsewhere/0", px=30_000)  # another host leads
    scheduler = LeaderScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
    scheduler.lease = BeatLease(leases, "here", 30.0)
    scheduler.tick()
    for name in ("reconcile-all", "flush-usage", "prune-model-cache"):
        scheduler.apply_entry(scheduler.schedule[name])
    assert sent == ["prune-model-cache"]
    assert scheduler.schedule["prune-model-cache"].options["queue"] == NODE_QUEUE
    leases.delete(beat.LEASE_KEY)  # the other host stopped: this one leads at its next try
    scheduler.lease.checked_at = None
    scheduler.tick()
    scheduler.apply_entry(scheduler.schedule["reconcile-all"])
    assert sent[-1] == "reconcile-all"
    scheduler.close()
    assert beat.leadership(leases)["leader"] is None  # a clean stop gives the lease back


def test_workers_beat_with_the_leader_scheduler():
    from workers.celery import app

    assert app.conf.beat_scheduler == "workers.beat:LeaderScheduler"


def test_the_api_says_which_host_leads_beat(api, leases, settings, redis_url):
    settings.REDIS_URL = redis_url
    assert api.get("/api/v1/beat").json()["leader"] is None
    BeatLease(leases, "gpu-1", 30.0).keep(100.0)
    shown = api.get("/api/v1/beat").json()
    assert (shown["leader"], shown["lease_s"]) == ("gpu-1", settings.WHARF_BEAT_LEASE_S)
    assert shown["since"] and shown["handovers"][0]["reason"] == beat.FIRST


def test_the_api_answers_503_when_redis_is_away(api, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = api.get("/api/v1/beat")
    assert response.status_code == 503 and "Redis" in response.json()["detail"]
