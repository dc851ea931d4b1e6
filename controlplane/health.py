"""The API's probes, for Kubernetes, Compose and systemd (deploy/):

- GET /healthz: liveness, 200 while the process answers requests (it reads nothing);
- GET /readyz: readiness, 200 when the database and Redis both answer, else 503 naming which
  does not, so a load balancer sends no request that would fail on either.

Both are open (no token): they say nothing about services, only whether this process serves.
"""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

REDIS_TIMEOUT_S = 2.0  # a probe's own timeout is a few seconds: answer before it


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database_problem() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return f"database: {exc}".strip()
    return ""


def _redis_problem() -> str:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"redis: {exc}"
    finally:
        client.close()
    return ""


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    problems = [p for p in (_database_problem(), _redis_problem()) if p]
    if problems:
        return JsonResponse({"status": "not ready", "reasons": problems}, status=503)
    return JsonResponse({"status": "ready"})
