"""Redis locks held as leases: one reconcile pass per service at a time, one placement in the
fleet at a time, one allocator per node.

A lock lives LEASE seconds unless its holder renews it, which a thread does every third of
that while the holder works. So a long pass keeps its lock, and a worker killed mid-pass
(SIGKILL, a lost host) blocks the others for LEASE seconds at most, not for as long as the
longest pass could take.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from redis.exceptions import LockError

from controlplane import redis_clients

log = logging.getLogger(__name__)

LEASE = 15.0  # seconds a lock outlives a holder that stopped renewing it
# Seconds between tries of a waiter (redis-py's default is 0.1): a burst's placing passes take
# the placement lock one after the other, each for tens of milliseconds, and a lock left idle
# until the next try is time every waiter loses.
RETRY = 0.005


def client() -> redis.Redis:
    """The process's client of the Redis in settings (controlplane.redis_clients)."""
    return redis_clients.shared(settings.REDIS_URL)


@contextmanager
def leased(key: str, wait: float) -> Iterator[bool]:
    """Hold the lock `key` for the block, waiting up to `wait` seconds for it; yields whether
    it was acquired (the block runs either way, so a caller that does not wait can requeue)."""
    # Not thread-local: the renewing thread must see the token the acquiring thread got.
    lock = client().lock(key, timeout=LEASE, blocking_timeout=wait, thread_local=False,
                         sleep=RETRY)  # fmt: skip
    if not lock.acquire():
        yield False
        return
    done = threading.Event()
    renewer = threading.Thread(target=_renew, args=(lock, done), name=f"lease {key}", daemon=True)
    renewer.start()
    try:
        yield True
    finally:
        done.set()
        renewer.join()
        try:
            lock.release()
        except LockError:  # it lapsed while Redis was unreachable; someone may hold it now
            log.warning("lock %s lapsed before its holder finished", key)


def _renew(lock: redis.lock.Lock, done: threading.Event) -> None:
    while not done.wait(LEASE / 3):
        try:
            lock.reacquire()
        except LockError:
            log.warning("lock %s lapsed before its holder finished", lock.name)
            return
        except redis.RedisError as exc:  # try again at the next turn, while the lease lasts
            log.warning("could not renew lock %s: %s", lock.name, exc)


@contextmanager
def node_lock(purpose: str, timeout: float = 60) -> Iterator[None]:
    """Held while a decision about this node's shared resources is made and acted on."""
    with leased(f"wharf:node:{settings.WHARF_NODE_NAME}:{purpose}", wait=timeout) as held:
        if not held:
            raise TimeoutError(f"node lock {purpose!r} busy for {timeout} s")
        yield


class LeasedPasses(threading.Thread):
    """A pass every `interval` seconds, fleet-wide, on whichever worker claims the period:
    every worker runs one (every GPU host runs a worker), the first to wake in a period takes
    its pass and the others skip it, so 500 hosts make one pass per interval between them, not
    500; the lease `lock` keeps passes one at a time. `run_pass` returns the services whose
    instances must move, which are reconciled."""

    def __init__(self, name: str, lock: str, interval: float, run_pass) -> None:
        super().__init__(name=name, daemon=True)
        self.lock, self.interval, self.run_pass = lock, interval, run_pass
        self._stopped = threading.Event()

    def run(self) -> None:
        from django.db import DatabaseError, close_old_connections, connections

        from workers.tasks import enqueue_reconcile

        while not self._stopped.wait(self.interval):
            try:
                close_old_connections()
                for service in self.pass_once():
                    enqueue_reconcile(service)
            except (DatabaseError, redis.RedisError, OSError) as exc:
                log.warning("%s pass failed: %s", self.name, exc)
            except Exception:  # a thread that dies silently would stop every later pass
                log.exception("%s pass failed", self.name)
        connections.close_all()  # this thread's own; stopped, it holds no database session

    def pass_once(self) -> set[str]:
        """This period's pass, unless another worker has claimed it (a key that lives nine
        tenths of the interval, so the claimant's next wake finds it gone)."""
        claim = max(1, int(self.interval * 900))  # milliseconds
        if not client().set(f"{self.lock}:period", "1", nx=True, px=claim):
            return set()
        with leased(self.lock, wait=0) as held:
            return self.run_pass() if held else set()

    def stop(self) -> None:
        self._stopped.set()
