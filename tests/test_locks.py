"""The workers' Redis locks are leases: held as long as the holder works, lapsing soon after a
holder that died (a SIGKILLed worker must not block a service's passes or the fleet's
placements for long). Against a real Redis."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from workers import locks

LEASE = 0.6  # seconds: short, so that lapsing and renewing both show within a test


@pytest.fixture
def key(settings, redis_url, monkeypatch):
    settings.REDIS_URL = redis_url
    monkeypatch.setattr(locks, "LEASE", LEASE)
    name = f"wharf:test-lock:{uuid.uuid4().hex}"
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def test_a_held_lock_keeps_others_out_and_is_free_after_the_block(key):
    with locks.leased(key, wait=0) as held:
        assert held
        with locks.leased(key, wait=0) as second:
            assert not second
    with locks.leased(key, wait=0) as again:
        assert again
    assert not locks.client().exists(key)


def test_the_holder_renews_its_lease_while_it_works(key):
    with locks.leased(key, wait=0) as held:
        assert held
        time.sleep(LEASE * 4)  # four leases long: only renewals keep it
        with locks.leased(key, wait=0) as other:
            assert not other, "the lock lapsed while its holder was still working"


def test_a_dead_holders_lock_lapses_within_one_lease(key):
    # What a SIGKILLed worker leaves: a lock taken with the lease and never renewed or released.
    assert locks.client().lock(key, timeout=LEASE, thread_local=False).acquire(blocking=False)
    started = time.monotonic()
    with locks.leased(key, wait=LEASE * 5) as held:
        waited = time.monotonic() - started
        assert held
    assert LEASE * 0.5 < waited < LEASE * 3


def test_a_waiter_gets_the_lock_when_the_holder_finishes(key):
    release = threading.Event()

    def holder() -> None:
        with locks.leased(key, wait=0) as held:
            assert held
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    time.sleep(0.1)
    threading.Timer(0.3, release.set).start()
    with locks.leased(key, wait=5) as held:
        assert held and release.is_set()
    thread.join()


def test_a_busy_node_lock_is_a_timeout_naming_it(settings, redis_url, monkeypatch):
    settings.REDIS_URL = redis_url
    settings.WHARF_NODE_NAME = f"test-{uuid.uuid4().hex[:8]}"
    busy = pytest.raises(TimeoutError, match="node lock 'cards' busy for 0.2 s")
    with locks.node_lock("cards"), busy, locks.node_lock("cards", timeout=0.2):
        pass


def test_workers_leased_passes_make_one_pass_per_interval_between_them(key):
    """Every worker (every GPU host) runs the autoscaler's, canary controller's and node
    follower's threads: the first to wake in a period takes its pass, the others skip it, and
    the next period's pass is free again."""
    ran: list[int] = []
    workers = [locks.LeasedPasses(f"worker-{i}", key, 0.2, lambda i=i: ran.append(i) or set())
               for i in range(3)]  # fmt: skip
    for worker in workers:
        assert worker.pass_once() == set()
    assert ran == [0]  # the other two found the period taken
    time.sleep(0.2)  # the claim lives 0.9 of the interval
    assert workers[2].pass_once() == set() and workers[0].pass_once() == set()
    assert ran == [0, 2]
    locks.client().delete(f"{key}:period")
