"""POST /console/services/<name>/test: the console's online test, relayed through the gateway.

The browser cannot call the gateway itself: it is another origin (no CORS there), and the
console has no service token to give it (only digests are stored). So this view calls the
gateway's OpenAI route server-side with a console API key of the signed-in user and streams
the engine's server-sent events back as they arrive. The key is kept sealed in the
server-side session, never sent to the browser, and expires on its own.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.http import require_POST
from rest_framework.exceptions import PermissionDenied

from contracts.spec_models import ADAPTER_NAME
from controlplane.audit.actor import identify
from controlplane.services.choices import DesiredState
from controlplane.services.models import Service
from controlplane.services.routing import publish_snapshot
from controlplane.services.sealing import UnsealError, seal_value, unseal_value
from controlplane.tokens.models import ApiKey
from controlplane.workspaces.access import access, in_workspace
from controlplane.workspaces.roles import KEYS

PATHS = ("chat/completions", "completions")
SESSION_KEY = "wharf_console_gateway_key"
KEY_LIFETIME = timedelta(hours=12)
# A new key reaches the gateways with the next snapshot (pub/sub, well under a second);
# until then the gateway answers 401, so a fresh key is retried for this long.
NEW_KEY_GRACE = 10.0
TIMEOUT = httpx.Timeout(600.0, connect=10.0)
# None: the network. Tests put an httpx.MockTransport here to play the gateway.
TRANSPORT: httpx.AsyncBaseTransport | None = None


def _error(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=status)


def _issue_key(user, workspace) -> dict:
    api_key, key = ApiKey.issue(
        user, workspace, name="console online test", expires_at=timezone.now() + KEY_LIFETIME
    )
    publish_snapshot()  # so the gateways learn the key now, not at their next poll
    # Sealed like a spec's secrets: the session row (database, cache) never holds the key
    # itself, only what WHARF_SECRETS_KEY opens.
    return {"id": api_key.pk, "key": seal_value(key), "plain": key}


async def _console_key(request: HttpRequest, workspace) -> tuple[str, bool]:
    """The session's console key for the service's workspace (and whether it was just
    issued); a new one when the session has none or its key is revoked or about to expire."""
    keys = await request.session.aget(SESSION_KEY) or {}
    stored = keys.get(str(workspace.pk)) if isinstance(keys, dict) else None
    if stored:
        soon = timezone.now() + timedelta(minutes=5)
        live = ApiKey.objects.filter(pk=stored["id"], revoked_at=None, expires_at__gt=soon)
        if await live.aexists():
            try:
                return unseal_value(stored["key"]), False
            except UnsealError:  # sealed with a key this Wharf no longer has: a new one
                pass
    user = await request.auser()
    stored = await sync_to_async(_issue_key)(user, workspace)
    key = stored.pop("plain")
    await request.session.aset(SESSION_KEY, {**keys, str(workspace.pk): stored})
    return key, True


def _service_workspace(request: HttpRequest, name: str):
    """The workspace of the service `name` if the user may test it (an online test issues a
    key: the keys right), else the refusal."""
    identify(request)  # the console key it may issue is a change: audited
    try:
        acting = access(request)
        acting.require(KEYS)
    except PermissionDenied as exc:
        return _error(403, str(exc.detail))
    live = Service.objects.exclude(desired_state=DesiredState.DELETED).filter(name=name)
    service = in_workspace(request, live).select_related("workspace").first()
    if service is None:
        return _error(404, f"no service named {name!r}")
    return service.workspace


def _parse(body: bytes) -> tuple[str, dict, str] | JsonResponse:
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        return _error(400, "the request body must be JSON")
    if not isinstance(payload, dict):
        return _error(400, "the request body must be a JSON object")
    path = payload.get("path", "chat/completions")
    if path not in PATHS:
        return _error(400, f"path must be one of {', '.join(PATHS)}")
    params = payload.get("body", {})
    if not isinstance(params, dict):
        return _error(400, "body must be a JSON object of request parameters")
    adapter = payload.get("adapter") or ""
    if not isinstance(adapter, str) or (adapter and not re.fullmatch(ADAPTER_NAME, adapter)):
        return _error(400, "adapter must be the name of one of the service's LoRA adapters")
    return path, params, adapter


@require_POST
async def test_call(request: HttpRequest, name: str) -> HttpResponse:
    user = await request.auser()
    if not user.is_authenticated:
        return _error(401, "sign in first")
    parsed = _parse(request.body)
    if isinstance(parsed, JsonResponse):
        return parsed
    path, params, adapter = parsed
    request.user = user  # resolved: the workspace checks below run in a thread
    workspace = await sync_to_async(_service_workspace)(request, name)
    if isinstance(workspace, JsonResponse):
        return workspace
    key, fresh = await _console_key(request, workspace)
    # The service is picked by its name (the gateway maps it to the served model name), an
    # adapter as "<name>:<adapter>", and usage is asked for so the panel can show token counts.
    model = f"{name}:{adapter}" if adapter else name
    body = {**params, "model": model, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    url = f"{settings.WHARF_GATEWAY_URL.rstrip('/')}/v1/{path}"
    client = httpx.AsyncClient(timeout=TIMEOUT, transport=TRANSPORT)
    deadline = time.monotonic() + NEW_KEY_GRACE
    try:
        while True:
            upstream = await client.send(
                client.build_request(
                    "POST", url, json=body, headers={"Authorization": f"Bearer {key}"}
                ),
                stream=True,
            )
            if not (upstream.status_code == 401 and fresh and time.monotonic() < deadline):
                break
            await upstream.aclose()
            await asyncio.sleep(0.3)
    except httpx.HTTPError as exc:
        await client.aclose()
        return _error(502, f"the gateway at {url} did not answer: {exc}")
    if upstream.status_code != 200:
        content = await upstream.aread()
        await upstream.aclose()
        await client.aclose()
        content_type = upstream.headers.get("content-type", "application/json")
        return HttpResponse(content, status=upstream.status_code, content_type=content_type)
    return StreamingHttpResponse(
        _relay(client, upstream),
        content_type="text/event-stream",
        # Proxies in front of the console must not hold the events back.
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _relay(client: httpx.AsyncClient, upstream: httpx.Response) -> AsyncIterator[bytes]:
    # Closing in `finally` matters: when the browser stops reading, Django cancels this
    # generator, and closing the upstream stream makes the gateway abort the engine request.
    # aiter_bytes, not aiter_raw: a compressed answer is decoded here, as this response does
    # not pass the gateway's Content-Encoding on.
    try:
        async for chunk in upstream.aiter_bytes():
            yield chunk
    finally:
        await upstream.aclose()
        await client.aclose()
