"""One snapshot build for many publishers at once (issue 31): every scheduling pass, API write
and agent transition asks for the routing snapshot to be published, and at 5,000 instances a
build reads the whole fleet. Asks that arrive while a build runs are folded into the next one:
each ask takes a number (`WANTED`); whoever holds the publishing lease builds and writes until
every number handed out is covered (`DONE`), and each asker returns once its own number is, so
a caller still finds its change published when the call returns. A build starts after the
number it covers was taken, and each asker commits its change before taking one, so that build
sees the change. A forced ask (a drain) makes the next build publish even unchanged routes.
A holder that dies leaves its lease to lapse (LEASE_S); the askers waiting then take it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import redis

WANTED = "wharf:snapshot:wanted"  # numbers handed out to asks
DONE = "wharf:snapshot:done"  # every ask up to this number is published
FORCED = "wharf:snapshot:forced"  # an ask since the last build wants it written unchanged
LEASE = "wharf:snapshot:publishing"  # who builds now
LEASE_S = 10.0
WAIT_S = 2 * LEASE_S  # past this an asker builds on its own: Redis answers, the lease does not
POLL_S = 0.005

# DONE only grows, whoever writes it last.
_RAISE = """local done = tonumber(redis.call('get', KEYS[1]) or '0')
if done < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1]) end return 0"""
_RELEASE = """if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0"""


def publish(client: redis.Redis, write: Callable[[bool], None], force: bool = False) -> None:
    """Have `write(force)` (build and write the snapshot) run once after this call began,
    here or in whichever process holds the lease; return when it has."""
    if force:
        client.set(FORCED, "1")
    mine = int(client.incr(WANTED))
    deadline = time.monotonic() + WAIT_S
    while int(client.get(DONE) or 0) < mine:
        token = uuid.uuid4().hex
        if client.set(LEASE, token, nx=True, px=int(LEASE_S * 1000)):
            try:
                _builds(client, write, mine)
            finally:
                client.eval(_RELEASE, 1, LEASE, token)
        elif time.monotonic() > deadline:
            write(bool(client.getdel(FORCED)) or force)
            return
        else:
            time.sleep(POLL_S)


def exclusively(client: redis.Redis, work: Callable[[], bool], wait: float = WAIT_S) -> bool:
    """`work()` while holding the publishing lease, so that nothing builds or patches the
    snapshot meanwhile (routing.publish_for's patch of one entry); False when the lease did
    not come within `wait` seconds (the caller builds instead)."""
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait
    while not client.set(LEASE, token, nx=True, px=int(LEASE_S * 1000)):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    try:
        return work()
    finally:
        client.eval(_RELEASE, 1, LEASE, token)


def _builds(client: redis.Redis, write: Callable[[bool], None], mine: int) -> None:
    """Build until every number handed out so far is covered (asks keep coming meanwhile);
    `mine` covers a Redis that lost its numbers since it was taken."""
    while True:
        wanted = max(int(client.get(WANTED) or 0), mine)
        if int(client.get(DONE) or 0) >= wanted:
            return
        write(bool(client.getdel(FORCED)))
        client.eval(_RAISE, 1, DONE, str(wanted))
