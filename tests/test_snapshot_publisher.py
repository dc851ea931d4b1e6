"""Publishes asked at once share a build (controlplane.services.publisher), on a real Redis:
each asker returns only once a build that began after its ask has been written."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from controlplane.services import publisher

KEYS = (publisher.WANTED, publisher.DONE, publisher.FORCED, publisher.LEASE)


@pytest.fixture
def client(redis_url) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.delete(*KEYS)
    yield client
    client.delete(*KEYS)
    client.close()


class Builds:
    """A write that takes `seconds` and records when each began and ended, and if forced."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.done: list[tuple[float, float, bool]] = []
        self.lock = threading.Lock()

    def __call__(self, forced: bool) -> None:
        began = time.monotonic()
        time.sleep(self.seconds)
        with self.lock:
            self.done.append((began, time.monotonic(), forced))


def test_one_ask_alone_builds_once_and_returns_after_it(client):
    builds = Builds()
    publisher.publish(client, builds)
    publisher.publish(client, builds, force=True)
    assert [forced for _, _, forced in builds.done] == [False, True]
    assert client.get(publisher.LEASE) is None  # given back


def test_asks_at_once_share_builds_and_each_returns_after_a_build_begun_after_it(redis_url):
    builds = Builds(seconds=0.05)
    asks: list[tuple[float, float]] = []

    def ask() -> None:
        client = redis.Redis.from_url(redis_url)  # a process of its own would have its own
        began = time.monotonic()
        publisher.publish(client, builds)
        asks.append((began, time.monotonic()))
        client.close()

    threads = [threading.Thread(target=ask) for _ in range(12)]
    for thread in threads:
        thread.start()
        time.sleep(0.01)
    for thread in threads:
        thread.join(10)
    assert len(asks) == 12
    assert len(builds.done) < 12  # shared: 12 asks over 0.12 s, builds of 0.05 s
    for began, returned in asks:
        assert any(began <= b_began and b_ended <= returned for b_began, b_ended, _ in builds.done)


def test_a_forced_ask_during_a_build_forces_the_next_one(client, redis_url):
    builds = Builds(seconds=0.2)
    first = threading.Thread(target=publisher.publish, args=(client, builds))
    first.start()
    time.sleep(0.05)  # the first build runs
    other = redis.Redis.from_url(redis_url)
    publisher.publish(other, builds, force=True)
    first.join(5)
    other.close()
    assert [forced for _, _, forced in builds.done] == [False, True]


def test_a_dead_holders_lease_lapses_and_an_asker_builds(client):
    client.set(publisher.LEASE, "a holder that died", px=300)
    builds = Builds()
    began = time.monotonic()
    publisher.publish(client, builds)
    assert len(builds.done) == 1 and builds.done[0][0] - began >= 0.25


def test_an_ask_after_redis_lost_the_numbers_still_gets_a_build(client):
    builds = Builds()
    client.set(publisher.WANTED, 5)
    publisher.publish(client, builds)  # takes 6: DONE is 6
    client.delete(publisher.WANTED, publisher.DONE)  # a Redis flushed or restarted empty
    publisher.publish(client, builds)  # takes 1 again
    assert len(builds.done) == 2 and int(client.get(publisher.DONE)) == 1


def test_work_done_exclusively_waits_for_a_build_and_never_overlaps_it(client, redis_url):
    """A patch of one entry (routing.publish_for) runs under the same lease as builds: it
    begins only after the build that holds the lease ends, and gives the lease back."""
    builds = Builds(seconds=0.3)
    asker = threading.Thread(target=publisher.publish, args=(redis.Redis.from_url(redis_url),
                                                             builds))  # fmt: skip
    asker.start()
    while client.get(publisher.LEASE) is None:
        time.sleep(0.005)
    began: list[float] = []
    assert publisher.exclusively(client, lambda: began.append(time.monotonic()) or True)
    asker.join()
    ((_, build_ended, _),) = builds.done
    assert began[0] >= build_ended and client.get(publisher.LEASE) is None


def test_work_that_finds_the_lease_held_too_long_is_not_done(client):
    client.set(publisher.LEASE, "someone else", px=5000)
    done: list[int] = []
    for wait in (0, 0.1):  # 0: only if nothing publishes now (routing.publish_for)
        assert not publisher.exclusively(client, lambda: done.append(1) or True, wait=wait)
    assert done == [] and client.get(publisher.LEASE) == b"someone else"
