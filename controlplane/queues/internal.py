"""The queues' internal routes, for the gateways only (each call carries the plane key,
contracts.plane_link): the gateway authenticates and limits the caller, then relays EAS's queue
API here as it came (`queue_call`); it watches for a WebSocket subscriber (`watch`) and leases
items for the instances it feeds (`lease`, `finish`, `give_back`, `renew`).

Async views: a Get that waits (`_timeout_`) or a watch's long poll holds no thread while it
waits; the database work runs in Django's sync threads between short sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from contracts.plane_link import CALLER_KEY, HEADER, is_plane_key
from contracts.queue_calls import (
    Attributes,
    Commit,
    Delete,
    Get,
    Put,
    QueueCallError,
    Search,
    Truncate,
    read_call,
    tags_of,
)
from contracts.queue_frames import frames
from controlplane.queues import store
from controlplane.queues.models import QueueItem, QueueName
from controlplane.services.models import Service

REQUEST_ID_HEADER = "X-Eas-Queueservice-Request-Id"
QUEUE_PATH = "x-wharf-queue-path"  # the path after /api/predict/<service>, for its instance
POLL_S = 0.2
PROTOBUF = "application/vnd.google.protobuf"
MAX_WATCH_WAIT_S = 10.0


def _refused(status: int, message: str, param: str = "") -> JsonResponse:
    error = {"code": status, "message": message, **({"param": param} if param else {})}
    return JsonResponse({"error": error}, status=status)


def _allowed(request: HttpRequest) -> bool:
    return is_plane_key(settings.WHARF_TOKEN_KEY.encode(), request.headers.get(HEADER, ""))


def _queue(name: str, queue: str) -> store.Queue:
    service = Service.objects.filter(name=name).first()
    if service is None:
        raise store.QueueRefusal(404, f"no service {name}")
    return store.queue_of(service, QueueName.SINK if queue == "sink" else QueueName.INPUT)


def _service(name: str) -> Service:
    """An Async service (its queue) or a Standard one (batches' requests) to lease from."""
    from controlplane.batches.store import expire_due  # noqa: PLC0415 (batches import this)

    service = Service.objects.filter(name=name).first()
    if service is None:
        raise store.QueueRefusal(404, f"no service {name}")
    expire_due()
    return service


def _item_json(item: QueueItem, index_only: bool = False) -> dict[str, Any]:
    data = b"" if index_only else bytes(item.data)
    return {
        "index": item.id,
        "data": base64.b64encode(data).decode(),
        "tags": item.tags,
        "message": item.tags.get("lastMessage", ""),
        "request_id": item.request_id,
    }


@csrf_exempt
async def queue_call(request: HttpRequest, service: str, queue: str) -> HttpResponse:
    """EAS's queue API on the input queue or the sink (contracts.queue_calls)."""
    if not _allowed(request):
        return _refused(403, "the control plane's queue routes are for the gateways")
    query = {name: request.GET.get(name, "") for name in request.GET}
    try:
        call = read_call(request.method or "GET", query)
        found = await sync_to_async(_queue)(service, queue)
    except QueueCallError as exc:
        return _refused(400, exc.message, exc.param)
    except store.QueueRefusal as exc:
        return _refused(exc.status, exc.message, exc.param)
    try:
        return await _answer(request, found, call)
    except store.QueueRefusal as exc:
        return _refused(exc.status, exc.message, exc.param)


async def _answer(request: HttpRequest, queue: store.Queue, call: Any) -> HttpResponse:
    if isinstance(call, Put):
        item = await sync_to_async(store.put)(
            queue,
            request.body,
            tags=call.tags,
            priority=call.priority,
            path=request.headers.get(QUEUE_PATH, ""),
            content_type=request.headers.get("content-type", ""),
            key_id=request.headers.get(CALLER_KEY, ""),
        )
        answer = HttpResponse(str(item.id), content_type="text/plain")
        answer[REQUEST_ID_HEADER] = item.request_id
        return answer
    if isinstance(call, Attributes):
        return JsonResponse(await sync_to_async(store.attributes)(queue))
    if isinstance(call, Search):
        where = await sync_to_async(store.search)(queue, call.index)
        if where is None:
            return _refused(404, f"no item {call.index} in the {queue.name} queue", "_index_")
        return JsonResponse(where)
    if isinstance(call, Get):
        return await _get(request, queue, call)
    if isinstance(call, (Delete, Commit)):
        await sync_to_async(store.delete)(queue, call.indexes)
        return HttpResponse("OK", content_type="text/plain")
    if isinstance(call, Truncate):
        await sync_to_async(store.truncate)(queue, call.below)
        return HttpResponse("OK", content_type="text/plain")
    return _refused(400, "a watch is a WebSocket", "_watch_")


async def _get(request: HttpRequest, queue: store.Queue, call: Get) -> HttpResponse:
    deadline = time.monotonic() + call.wait_s
    while True:
        items = await sync_to_async(store.get)(queue, call)
        if items or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    if PROTOBUF in request.headers.get("accept", ""):
        if not items and call.request_id:
            return HttpResponse(status=204)  # not ready yet
        return HttpResponse(frames([store.frame_of(item) for item in items]), content_type=PROTOBUF)
    if not items:
        return HttpResponse(status=204)
    if not call.raw:
        return JsonResponse([_item_json(item) for item in items], safe=False)
    first = items[0]
    answer = HttpResponse(bytes(first.data), content_type=first.content_type or "text/plain")
    answer["X-Eas-Queueservice-Index"] = str(first.id)
    answer[REQUEST_ID_HEADER] = first.request_id
    return answer


@csrf_exempt
async def watch(request: HttpRequest, service: str, queue: str) -> HttpResponse:
    """A WebSocket subscriber's next items, for the gateway that holds its socket: a long poll
    that answers as soon as there is something to send (or something it sent was committed)."""
    if not _allowed(request):
        return _refused(403, "the control plane's queue routes are for the gateways")
    query = {name: request.GET.get(name, "") for name in request.GET}
    try:
        found = await sync_to_async(_queue)(service, queue)
        after = int(query.pop("after", "0") or 0)
        pending = tuple(int(i) for i in query.pop("pending", "").split(",") if i)
        window = max(1, min(int(query.pop("window", "1") or 1), 1000))
        wait = min(float(query.pop("wait", "0") or 0), MAX_WATCH_WAIT_S)
        index_only = query.pop("index_only", "") == "true"
        tags = tags_of(query)
    except (ValueError, store.QueueRefusal) as exc:
        return _refused(400, str(exc))
    deadline = time.monotonic() + wait
    while True:
        gone, items = await sync_to_async(store.watch)(found, after, pending, window, tags)
        if gone or items or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    return JsonResponse({"gone": gone, "items": [_item_json(i, index_only) for i in items]})


def _body(request: HttpRequest) -> dict[str, Any]:
    data = json.loads(request.body or b"{}")
    if not isinstance(data, dict) or not isinstance(data.get("holder"), str):
        raise ValueError("a JSON object with the holder")
    return data


@csrf_exempt
async def lease(request: HttpRequest) -> HttpResponse:
    """Items for the gateway `holder` to hand to the ready instances it names; none of the
    batch requests of the API keys it says are at their rpm or tpm (`held_keys`)."""
    if not _allowed(request):
        return _refused(403, "the control plane's queue routes are for the gateways")
    try:
        data = _body(request)
        service = await sync_to_async(_service)(str(data["service"]))
        room = data.get("room")
        items = await sync_to_async(store.lease)(
            service,
            data["holder"],
            [str(i) for i in data.get("instances", [])][:1000],
            float(data.get("lease_s", 30)),
            None if room is None else {str(k): int(v) for k, v in dict(room).items()},
            frozenset(str(k) for k in data.get("held_keys", [])[:10_000]),
        )
    except (ValueError, KeyError) as exc:
        return _refused(400, str(exc))
    except store.QueueRefusal as exc:
        return _refused(exc.status, exc.message)
    now = timezone.now()
    return JsonResponse(
        {
            "items": [
                {
                    **_item_json(item),
                    "instance": item.instance,
                    "path": item.path,
                    "content_type": item.content_type,
                    "key_id": item.key_id,
                    "batch": item.batch_id or "",
                    "age_s": (now - item.created_at).total_seconds(),
                }
                for item in items
            ]
        }
    )


@csrf_exempt
async def finish(request: HttpRequest) -> HttpResponse:
    """An item's answer (`status`, `data` base64, `content_type`), or, with `reason` and no
    status, the item given back (its instance could not finish it)."""
    if not _allowed(request):
        return _refused(403, "the control plane's queue routes are for the gateways")
    try:
        data = _body(request)
        index = int(data["index"])
        if data.get("status") is None:
            taken = await sync_to_async(store.give_back)(
                index,
                data["holder"],
                str(data.get("reason", "")),
                data.get("delivered") is not False,
            )
        else:
            taken = await sync_to_async(store.finish)(
                index,
                data["holder"],
                int(data["status"]),
                base64.b64decode(data.get("data", "")),
                str(data.get("content_type", "")),
            )
    except (ValueError, KeyError) as exc:
        return _refused(400, str(exc))
    return JsonResponse({"taken": taken})


@csrf_exempt
async def renew(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        return _refused(403, "the control plane's queue routes are for the gateways")
    try:
        data = _body(request)
        indexes = [int(i) for i in data.get("indexes", [])]
        count = await sync_to_async(store.renew)(
            data["holder"], indexes, float(data.get("lease_s", 30))
        )
    except (ValueError, KeyError) as exc:
        return _refused(400, str(exc))
    return JsonResponse({"renewed": count})
