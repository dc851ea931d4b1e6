"""A signed-in API client and the Redis the routing snapshot is published to, for tests of
the REST API against the configured database."""

from __future__ import annotations

import redis
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from contracts.routing import SNAPSHOT_KEY, Snapshot
from controlplane.tokens.models import ApiToken


def client_for(username: str, staff: bool = False) -> APIClient:
    """A client with an API token of a new user (the user is `client.user`)."""
    user = get_user_model().objects.create_user(username, is_staff=staff)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user, 'test')}")
    client.user = user
    return client


def snapshot_store(settings, redis_url: str) -> redis.Redis:
    """The control plane publishes to this Redis; no snapshot from an earlier test is in it."""
    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    client.delete(SNAPSHOT_KEY)
    return client


def published(store: redis.Redis) -> Snapshot:
    return Snapshot.from_json(store.get(SNAPSHOT_KEY))
