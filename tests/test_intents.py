"""The API's asks of the workers (controlplane.intents) through a real Redis and a real Celery
producer: a reconcile ask is one task message by name, and asks while it is queued coalesce."""

from __future__ import annotations

import base64
import json

import pytest
import redis

from contracts import reconcile
from controlplane import intents


@pytest.fixture
def broker(settings, redis_url):
    """The API's Redis and Celery broker on the test Redis, its default queue emptied."""
    url = redis_url.replace("unix://", "redis+socket://", 1)
    settings.REDIS_URL, settings.CELERY_BROKER_URL = redis_url, url
    intents._celery.cache_clear()
    client = redis.Redis.from_url(redis_url)
    names = [f"svc-{letter}" for letter in "abcde"]  # every service these tests ask for
    keys = [reconcile.pending_key(n) for n in names] + [reconcile.ran_key(n) for n in names]
    client.delete("celery", *keys)
    yield client
    client.delete("celery", *keys)
    intents._celery.cache_clear()


def _queued(client: redis.Redis) -> list[tuple[str, list]]:
    """(task name, args) of every message in the default queue, oldest first."""
    found = []
    for raw in reversed(client.lrange("celery", 0, -1)):  # Celery pushes on the left
        message = json.loads(raw)
        args, _, _ = json.loads(base64.b64decode(message["body"]))
        found.append((message["headers"]["task"], args))
    return found


def test_asks_while_one_is_queued_coalesce(broker):
    intents.reconcile_service("svc-a")
    intents.reconcile_service("svc-a")
    intents.reconcile_service("svc-b")
    assert _queued(broker) == [(reconcile.TASK, ["svc-a"]), (reconcile.TASK, ["svc-b"])]
    # A pass lost with a dead worker is asked again soon (by the periodic pass).
    assert 0 < broker.ttl(reconcile.pending_key("svc-a")) <= 15


def test_the_pass_clears_the_marker_so_the_next_change_asks_again(broker):
    intents.reconcile_service("svc-a")
    broker.delete(reconcile.pending_key("svc-a"))  # what a pass does as it starts
    intents.reconcile_service("svc-a")
    assert _queued(broker) == [(reconcile.TASK, ["svc-a"])] * 2


def test_an_ask_due_sooner_than_the_queued_pass_is_queued_too(broker):
    """A pass queued to come back in a while does not hold back one asked for now (an
    instance turned ready); one asked for later than the queued one adds nothing."""
    reconcile.ask(broker, intents._celery(), "svc-a", countdown=2)
    reconcile.ask(broker, intents._celery(), "svc-a", countdown=5)  # later: coalesced
    intents.reconcile_service("svc-a")  # now: sooner than the queued one
    intents.reconcile_service("svc-a")  # as soon as the one just queued: coalesced
    assert _queued(broker) == [(reconcile.TASK, ["svc-a"])] * 2
    assert 0 < broker.ttl(reconcile.pending_key("svc-a")) <= 15


def _asked(client: redis.Redis) -> list[float]:
    """When each queued pass was asked (its `asked` argument), oldest first."""
    return [
        json.loads(base64.b64decode(json.loads(raw)["body"]))[1]["asked"]
        for raw in reversed(client.lrange("celery", 0, -1))
    ]


@pytest.mark.django_db
def test_a_pass_asked_before_a_whole_pass_started_is_skipped(broker, monkeypatch):
    """A follow-up queued before a pass that then ran (asked by an instance turned ready) has
    nothing left to see: it is skipped, and the marker of the pass asked since stays. A pass
    still running, or one that died, covers nothing."""
    from workers import tasks

    broker.delete(reconcile.ran_key("svc-a"))
    reconcile.ask(broker, intents._celery(), "svc-a", countdown=5)  # a follow-up
    reconcile.ask(broker, intents._celery(), "svc-a")  # an instance turned ready: sooner
    follow_up, ready = _asked(broker)

    def during_the_pass(name, fleet=None):
        assert not reconcile.covered(broker, "svc-a", ready)  # not before it has finished
        return None

    monkeypatch.setattr(tasks, "reconcile_isolated", during_the_pass)
    tasks.reconcile_service("svc-a", asked=ready)
    assert reconcile.covered(broker, "svc-a", follow_up)
    intents.reconcile_service("svc-a")  # a change after the pass: its own pass
    after = _asked(broker)[-1]
    assert not reconcile.covered(broker, "svc-a", after)
    monkeypatch.setattr(tasks, "reconcile_isolated", lambda *a: pytest.fail("a covered pass ran"))
    tasks.reconcile_service("svc-a", asked=follow_up)
    assert broker.exists(reconcile.pending_key("svc-a"))  # the later ask's marker stays
    monkeypatch.setattr(tasks, "reconcile_isolated", lambda *a: None)
    tasks.reconcile_service("svc-a", asked=after)
    assert not broker.exists(reconcile.pending_key("svc-a"))


@pytest.mark.django_db
def test_a_change_after_a_pass_read_is_never_left_to_a_pass_it_covers(broker, monkeypatch):
    """An instance turns ready just as a pass starts (its ask sets the marker), another once
    the pass has read (its ask coalesces into that marker). The pass covers the first ask's
    queued pass, so the second must have a pass of its own: exactly one more pass runs. With
    the marker deleted before the pass's start was stamped, none ran, and the second change
    waited for the periodic pass."""
    from workers import tasks

    broker.delete(reconcile.ran_key("svc-a"))
    stamp = reconcile.now

    def an_ask_as_the_pass_starts(client):
        reconcile.ask(broker, intents._celery(), "svc-a")
        return stamp(client)

    def an_ask_once_it_has_read(name, fleet=None):
        reconcile.ask(broker, intents._celery(), "svc-a")
        return None

    monkeypatch.setattr(reconcile, "now", an_ask_as_the_pass_starts)
    monkeypatch.setattr(tasks, "reconcile_isolated", an_ask_once_it_has_read)
    tasks.reconcile_service("svc-a")
    monkeypatch.setattr(reconcile, "now", stamp)
    passes: list[str] = []
    monkeypatch.setattr(tasks, "reconcile_isolated", lambda name, fleet=None: passes.append(name))
    for asked in _asked(broker):  # every queued pass, in turn
        tasks.reconcile_service("svc-a", asked=asked)
    assert passes == ["svc-a"]
    assert not broker.exists(reconcile.pending_key("svc-a"))  # the next change asks again


SWEEP_LIST = "celery\x06\x169"  # kombu's Redis transport: the queue's list for priority 9


def _taken_in_order(count: int) -> list[tuple[str, float]]:
    """(service, asked) of the next `count` passes as a consumer of the workers' broker takes
    them (kombu's Redis transport: each priority's list in turn)."""
    app = intents._celery()
    taken = []
    with app.connection_for_read() as connection:
        queue = connection.SimpleQueue("celery")
        for _ in range(count):
            message = queue.get(timeout=1)
            args, kwargs, _ = json.loads(message.body)
            taken.append((args[0], kwargs["asked"]))
            message.ack()
        queue.close()
    return taken


def test_the_periodic_sweep_waits_behind_passes_asked_by_changes(broker):
    """reconcile-all's passes (reconcile.sweep) are taken after every pass a change asked,
    even one asked after them; a change's ask is never coalesced with a queued sweep, and a
    sweep adds nothing while any pass of the service is queued."""
    broker.delete(SWEEP_LIST)
    celery = intents._celery()
    reconcile.sweep(broker, celery, ["svc-a"])
    reconcile.sweep(broker, celery, ["svc-a"])  # queued already: nothing
    assert broker.llen(SWEEP_LIST) == 1 and _queued(broker) == []
    intents.reconcile_service("svc-b")
    reconcile.sweep(broker, celery, ["svc-b"])  # a change's pass is queued: nothing
    intents.reconcile_service("svc-a")  # a change after the sweep: queued ahead of it
    assert broker.llen(SWEEP_LIST) == 1
    taken = _taken_in_order(3)
    assert [name for name, _ in taken] == ["svc-b", "svc-a", "svc-a"]
    assert taken[2][1] < taken[0][1]  # the last one taken is the sweep, asked first
    assert broker.llen(SWEEP_LIST) == 0 and _queued(broker) == []


def test_one_sweep_over_many_services_queues_one_pass_each_not_yet_queued(broker):
    """reconcile-all's fan-out in one round trip and on one connection: a pass for each
    service with none queued, nothing for the others, in the order given."""
    broker.delete(SWEEP_LIST)
    celery = intents._celery()
    intents.reconcile_service("svc-b")  # a change's pass is queued
    reconcile.sweep(broker, celery, ["svc-c"])  # a sweep's pass is queued
    reconcile.sweep(broker, celery, [f"svc-{letter}" for letter in "abcde"])
    reconcile.sweep(broker, celery, [])  # nothing to sweep: nothing sent
    taken = [name for name, _ in _taken_in_order(5)]
    assert taken == ["svc-b", "svc-c", "svc-a", "svc-d", "svc-e"]
    assert broker.llen(SWEEP_LIST) == 0 and _queued(broker) == []
