"""The queues' operations on the database: EAS's queue API (contracts.queue_calls) for callers,
and the lease protocol for the gateways that feed the instances (controlplane.queues.internal).

An input item is `pending` until a gateway leases it for an instance (`working`, until
`lease_until`, renewed while the instance works on it). Its answer becomes a sink item and the
input item goes, in one transaction, and only for the gateway that still holds the lease: an
answer is never written twice. A lease that lapses (its gateway died) or an item given back (its
instance died) is pending again, until it has been handed out `max_delivery` times: then its sink
item holds the failure.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings as django_settings
from django.db import transaction
from django.db.models import BooleanField, Count, ExpressionWrapper, Min, Q
from django.utils import timezone

from contracts.queue_calls import Get
from contracts.queue_frames import Frame
from contracts.spec import typed_spec
from contracts.spec_queue import QueueSettings, is_async, queue_settings, window
from controlplane.queues.models import ItemState, QueueItem, QueueName
from controlplane.services.models import Service
from controlplane.workspaces.quota_checks import queued_over

FAILED_DELIVERY = 502  # a sink item's code when no instance could finish its item
BATCH_MAX_DELIVERY = 3  # deliveries of a batch's request (a Standard service has no queue spec)
# Which pending item goes first: Async items (no batch; EAS's _priority_ 1 before 0), then
# batches' requests, the oldest batch first. Online calls never queue here: they go before all.
LEASE_ORDER = (
    ExpressionWrapper(Q(batch__isnull=True), output_field=BooleanField()).desc(),
    "-priority",
    "id",  # a batch's requests were all put at once: the oldest batch's go first
)


class QueueRefusal(Exception):  # noqa: N818 (a refusal, answered as a 4xx)
    """A call the queue refuses: `status` (413, 429, 404), a message and the field or quota
    it names (`param`, "" when none)."""

    def __init__(self, status: int, message: str, param: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def check_queued(workspace_id: int, adding: int) -> None:
    """QueueRefusal 429 naming `quotas.queued_items` when `adding` more items would take the
    workspace past it (controlplane.workspaces.quotas); inside the write's transaction."""
    over = queued_over(workspace_id, adding)
    if over:
        name, reasons = next(iter(over.items()))
        raise QueueRefusal(429, f"over the queued-items quota ({name}): {reasons[0]}", name)


@dataclass(frozen=True)
class Queue:
    """One queue of an Async service, with its service's settings."""

    service: Service
    name: str  # QueueName
    settings: QueueSettings
    window: int

    @property
    def items(self):  # noqa: ANN201 (a QuerySet)
        return QueueItem.objects.filter(service=self.service, queue=self.name)

    @property
    def max_length(self) -> int:
        side = self.settings.sink if self.name == QueueName.SINK else self.settings.source
        return side.max_length

    @property
    def max_bytes(self) -> int:
        side = self.settings.sink if self.name == QueueName.SINK else self.settings.source
        return side.max_payload_size_kb * 1024


def queue_of(service: Service, name: str) -> Queue:
    """The queue `name` of `service`; QueueRefusal 404 when it is not an Async service."""
    spec = typed_spec(service.plain_spec())
    if not is_async(spec):
        raise QueueRefusal(404, f"{service.name} is not an Async service: it has no queues")
    return Queue(service, name, queue_settings(spec), window(spec))


def frame_of(item: QueueItem) -> Frame:
    return Frame(item.id, bytes(item.data), dict(item.tags), "")


def put(
    queue: Queue,
    data: bytes,
    *,
    tags: dict[str, str],
    priority: int = 0,
    path: str = "",
    content_type: str = "",
    key_id: str = "",
) -> QueueItem:
    """A new item at the end of the queue (priority 1 before every 0)."""
    if len(data) > queue.max_bytes:
        raise QueueRefusal(
            413,
            f"an item of the {queue.name} queue is at most "
            f"{queue.max_bytes // 1024} KiB (queue.{_side(queue)}"
            f".max_payload_size_kb)",
        )
    with transaction.atomic():
        Service.objects.select_for_update().filter(pk=queue.service.pk).exists()  # one at a time
        # Then the workspace, in the order the services' API takes them (no deadlock).
        check_queued(queue.service.workspace_id, 1 if queue.name == QueueName.INPUT else 0)
        if queue.items.count() >= queue.max_length:
            raise QueueRefusal(
                429,
                f"the {queue.name} queue holds {queue.max_length} items "
                f"(queue.{_side(queue)}.max_length): take some out first",
            )
        return QueueItem.objects.create(
            service=queue.service,
            queue=queue.name,
            request_id=str(uuid.uuid4()),
            data=data,
            tags=tags,
            priority=priority,
            path=path,
            content_type=content_type[:128],
            key_id=key_id,
        )


def _side(queue: Queue) -> str:
    return "sink" if queue.name == QueueName.SINK else "source"


def attributes(queue: Queue) -> dict[str, str]:
    """EAS's attributes (the SDK reads stream.length and stream.lastEntry)."""
    figures = queue.items.aggregate(
        length=Count("id"), first=Min("id"), working=Count("id", filter=Q(state=ItemState.WORKING))
    )
    last = queue.items.order_by("-id").values_list("id", flat=True).first()
    oldest = queue.items.order_by("id").values_list("created_at", flat=True).first()
    return {
        "meta.name": f"{queue.service.name}{'/sink' if queue.name == QueueName.SINK else ''}",
        "meta.type": "stream",
        "stream.length": str(figures["length"]),
        "stream.firstEntry": str(figures["first"] or 0),
        "stream.lastEntry": str(last or 0),
        "stream.approxMaxLength": str(queue.max_length),
        "stream.maxPayloadBytes": str(queue.max_bytes),
        "stream.working": str(figures["working"]),
        "stream.oldestAgeSeconds": str(
            int((timezone.now() - oldest).total_seconds()) if oldest else 0
        ),
        "consumers.window": str(queue.window),
    }


def search(queue: Queue, index: int) -> dict[str, object] | None:
    """Where item `index` stands: being worked on, or how many items go before it."""
    item = queue.items.filter(id=index).first()
    if item is None:
        return None
    if item.state == ItemState.WORKING:
        return {"ConsumerId": item.instance, "IsPending": True, "WaitCount": 0}
    ahead = (
        queue.items.filter(state=ItemState.PENDING)
        .filter(Q(priority__gt=item.priority) | Q(priority=item.priority, id__lt=item.id))
        .count()
    )
    return {"ConsumerId": "", "IsPending": False, "WaitCount": ahead}


def _tagged(items, tags: dict[str, str]):  # noqa: ANN001, ANN202 (QuerySets)
    for name, value in tags.items():
        items = items.filter(**{f"tags__{name}": value})
    return items


def get(queue: Queue, call: Get) -> list[QueueItem]:
    """The items a Get asks for, now (the caller waits and asks again); deleted when it says."""
    items = queue.items.filter(id__gte=call.index) if call.index else queue.items
    if call.request_id:
        items = items.filter(request_id=call.request_id)
    if queue.name == QueueName.INPUT:
        items = items.filter(state=ItemState.PENDING)
    found = list(_tagged(items, call.tags).order_by("id")[: call.length])
    if call.auto_delete and found:
        queue.items.filter(id__in=[item.id for item in found]).delete()
    return found


def delete(queue: Queue, indexes: tuple[int, ...]) -> int:
    return queue.items.filter(id__in=indexes).delete()[0]


def truncate(queue: Queue, below: int) -> int:
    return queue.items.filter(id__lt=below).delete()[0]


def watch(
    queue: Queue, after: int, pending: tuple[int, ...], window: int, tags: dict[str, str]
) -> tuple[list[int], list[QueueItem]]:
    """For a watcher that was sent `pending` (not yet committed) and everything up to `after`:
    which of `pending` are gone (committed), and the next items its window has room for."""
    still = set(queue.items.filter(id__in=pending).values_list("id", flat=True))
    gone = [index for index in pending if index not in still]
    room = window - len(still)
    if room <= 0:
        return gone, []
    items = queue.items.filter(id__gt=after)
    if queue.name == QueueName.INPUT:
        items = items.filter(state=ItemState.PENDING)
    return gone, list(_tagged(items, tags).order_by("id")[:room])


# The gateways' side: leases.


@dataclass(frozen=True)
class Terms:
    """How a service's items are handed out: per instance at once, deliveries, the sink's
    bound (None: a Standard service's batch answers, bounded by the batch's size)."""

    window: int
    max_delivery: int
    sink_max: int | None


def terms_of(service: Service) -> Terms:
    spec = typed_spec(service.plain_spec())
    if is_async(spec):
        queue = queue_settings(spec)
        return Terms(window(spec), queue.max_delivery, queue.sink.max_length)
    threads = spec.metadata.rpc.worker_threads if spec.metadata.rpc else None
    return Terms(threads or django_settings.WHARF_BATCH_WINDOW, BATCH_MAX_DELIVERY, None)


def _expire(service: Service, now) -> None:  # noqa: ANN001
    """Items whose gateway stopped renewing their lease: pending again, or failed for good."""
    lapsed = QueueItem.objects.select_for_update().filter(
        service=service, queue=QueueName.INPUT, state=ItemState.WORKING, lease_until__lt=now
    )
    for item in lapsed:
        _return(
            item,
            "its gateway stopped renewing the lease (the gateway or its instance "
            "stopped while working on it)",
        )


def _return(item: QueueItem, reason: str) -> None:
    if item.deliveries >= terms_of(item.service).max_delivery:
        _answer(item, FAILED_DELIVERY, reason.encode(), "text/plain", message=reason)
        if item.batch_id is not None:
            _batch_answered(item.batch_id)
        return
    item.state, item.holder, item.instance, item.lease_until = ItemState.PENDING, "", "", None
    item.save(update_fields=["state", "holder", "instance", "lease_until", "deliveries"])


def _answer(
    item: QueueItem, status: int, data: bytes, content_type: str, message: str = ""
) -> None:
    tags = {
        **item.tags,
        "requestId": item.request_id,
        "lastCode": str(status),
        "deliveries": str(item.deliveries),
    }
    if message:
        tags["lastMessage"] = message[:200]
    QueueItem.objects.create(
        service=item.service,
        queue=QueueName.SINK,
        request_id=item.request_id,
        data=data,
        tags=tags,
        priority=item.priority,
        content_type=content_type[:128],
        key_id=item.key_id,
        status=status,
        deliveries=item.deliveries,
        batch_id=item.batch_id,
        custom_id=item.custom_id,
    )
    item.delete()


def lease(
    service: Service,
    holder: str,
    instances: list[str],
    lease_s: float,
    room: dict[str, int] | None = None,
    held_keys: frozenset[str] = frozenset(),
) -> list[QueueItem]:
    """Items for the ready `instances`, each up to its window of items at once (counted across
    every gateway) and, where the gateway says, the `room` online calls leave it
    (contracts.sharing); Async items first, then batches'; none while the sink is full. No
    batch request of the API keys in `held_keys` (at their rpm or tpm, gateway.queues.holds):
    the requests of other keys behind them go first."""
    terms = terms_of(service)
    inputs = QueueItem.objects.filter(service=service, queue=QueueName.INPUT)
    now = timezone.now()
    with transaction.atomic():
        Service.objects.select_for_update().filter(pk=service.pk).exists()  # one lease at a time
        _expire(service, now)
        sink = QueueItem.objects.filter(service=service, queue=QueueName.SINK, batch=None)
        if not instances or (terms.sink_max is not None and sink.count() >= terms.sink_max):
            return []
        busy = dict(
            inputs.filter(state=ItemState.WORKING, instance__in=instances)
            .values_list("instance")
            .annotate(n=Count("id"))
        )
        free = {name: terms.window - busy.get(name, 0) for name in instances}
        if room is not None:
            free = {name: min(n, room.get(name, 0)) for name, n in free.items()}
        total = sum(max(0, n) for n in free.values())
        if total <= 0:
            return []
        pending = inputs.filter(state=ItemState.PENDING)
        if held_keys:
            pending = pending.exclude(batch__isnull=False, key_id__in=held_keys)
        taken = list(pending.select_for_update().order_by(*LEASE_ORDER)[:total])
        until = now + timedelta(seconds=lease_s)
        for item in taken:
            name = max(free, key=lambda n: free[n])  # the instance with the most room
            free[name] -= 1
            item.state, item.holder, item.instance, item.lease_until = (
                ItemState.WORKING,
                holder,
                name,
                until,
            )
            item.deliveries += 1
            item.save(update_fields=["state", "holder", "instance", "lease_until", "deliveries"])
        return taken


def _held(index: int, holder: str) -> QueueItem | None:
    return (
        QueueItem.objects.select_for_update()
        .select_related("service")
        .filter(id=index, queue=QueueName.INPUT, state=ItemState.WORKING, holder=holder)
        .first()
    )


def finish(index: int, holder: str, status: int, data: bytes, content_type: str) -> bool:
    """The answer to item `index`, from the gateway that holds it: into the sink, once."""
    with transaction.atomic():
        item = _held(index, holder)
        if item is None:
            return False  # its lease lapsed and it went elsewhere: that answer counts
        if item.batch_id is not None:
            _answer(item, status, data, content_type)
            _batch_answered(item.batch_id)
            return True
        sink = queue_of(item.service, QueueName.SINK)
        if len(data) > sink.max_bytes:
            why = (
                f"the answer was {len(data)} bytes, over the sink's "
                f"queue.sink.max_payload_size_kb ({sink.max_bytes // 1024} KiB)"
            )
            _answer(item, 413, why.encode(), "text/plain", message=why)
        else:
            _answer(item, status, data, content_type)
        return True


def _batch_answered(batch_id: str) -> None:
    """A batch's request was answered: the batch is finalized after its last one."""
    from controlplane.batches.store import settle  # noqa: PLC0415 (batches import the queues)

    transaction.on_commit(lambda: settle(batch_id))


def give_back(index: int, holder: str, reason: str, delivered: bool = True) -> bool:
    """Item `index`, which its instance could not finish: to another, or failed for good.
    Not `delivered` (the gateway never sent it: its instance had failed since the lease), the
    delivery does not count."""
    with transaction.atomic():
        item = _held(index, holder)
        if item is None:
            return False
        if not delivered:
            item.deliveries = max(item.deliveries - 1, 0)
        _return(item, reason[:500])
        return True


def renew(holder: str, indexes: list[int], lease_s: float) -> int:
    """Keep the leases of the items `holder` still works on."""
    return QueueItem.objects.filter(id__in=indexes, holder=holder, state=ItemState.WORKING).update(
        lease_until=timezone.now() + timedelta(seconds=lease_s)
    )


def backlog(service: Service) -> dict[str, int]:
    """The queue's figures the console, the CLI and the autoscaler read."""
    figures = QueueItem.objects.filter(service=service).aggregate(
        pending=Count("id", filter=Q(queue=QueueName.INPUT, state=ItemState.PENDING)),
        working=Count("id", filter=Q(queue=QueueName.INPUT, state=ItemState.WORKING)),
        sink=Count("id", filter=Q(queue=QueueName.SINK)),
    )
    return dict(figures)


def figures(service: Service) -> dict[str, object]:
    """What the console, the CLI and the metrics show of an Async service's queues."""
    inputs, sink = queue_of(service, QueueName.INPUT), queue_of(service, QueueName.SINK)
    now = timezone.now()
    counted = backlog(service)
    oldest = (inputs.items.filter(state=ItemState.PENDING).order_by("created_at")
              .values_list("created_at", flat=True).first())  # fmt: skip
    redelivered = inputs.items.filter(state=ItemState.PENDING, deliveries__gt=0).count()
    failed = sink.items.filter(status=FAILED_DELIVERY, tags__has_key="lastMessage").count()
    return {
        "window": inputs.window,
        "max_delivery": inputs.settings.max_delivery,
        "input": {"pending": counted["pending"], "working": counted["working"],
                  "oldest_pending_s": round((now - oldest).total_seconds(), 1) if oldest else 0,
                  "redelivering": redelivered, "max_length": inputs.max_length,
                  "max_payload_size_kb": inputs.max_bytes // 1024},
        "sink": {"length": counted["sink"], "failed": failed, "max_length": sink.max_length,
                 "max_payload_size_kb": sink.max_bytes // 1024},
    }  # fmt: skip
