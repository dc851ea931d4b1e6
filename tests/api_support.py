"""A signed-in API client and the Redis the routing snapshot is published to, for tests of
the REST API against the configured database."""

from __future__ import annotations

import redis
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from contracts.grants import parse_grants
from contracts.routing import SNAPSHOT_KEY, Snapshot
from controlplane.tokens.models import ApiToken
from controlplane.workspaces.members import ensure_member
from controlplane.workspaces.models import DEFAULT, Workspace


def default_workspace() -> Workspace:
    """The workspace the migrations make (again after a test that flushed the database)."""
    return Workspace.objects.get_or_create(name=DEFAULT)[0]


def member(user, role: str = "developer", workspace: str = DEFAULT) -> Workspace:
    """`user` made a member of `workspace` (created if missing) with `role`."""
    return ensure_member(user, workspace, role)


def grant(workspace: str = DEFAULT, **grants) -> Workspace:
    """`workspace` (created if missing) granted `grants` (contracts.grants.Grants' fields), as
    staff would grant them; the others closed."""
    found = Workspace.objects.get_or_create(name=workspace)[0]
    found.grants = parse_grants(grants).model_dump()
    found.save(update_fields=["grants"])
    return found


def client_for(
    username: str, staff: bool = False, role: str = "developer", workspace: str = DEFAULT
) -> APIClient:
    """A client with an API token of a new user, a `role` in `workspace` (the user is
    `client.user`)."""
    user = get_user_model().objects.create_user(username, is_staff=staff)
    token = ApiToken.issue(user, member(user, role, workspace), "test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
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
