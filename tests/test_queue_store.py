"""The queues' store (controlplane.queues.store) on the database: bounds, order, leases across
gateways, an answer taken once, redelivery up to max_delivery, lapsed leases, and what a
watcher is sent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from contracts.queue_calls import Get
from controlplane.queues import store
from controlplane.queues.models import QueueItem
from controlplane.services.models import Service
from tests.api_support import default_workspace

pytestmark = pytest.mark.django_db


def _service(queue: dict | None = None, threads: int = 2) -> Service:
    spec = {"name": "sd", "metadata": {"type": "Async", "instance": 2,
                                       "rpc": {"worker_threads": threads}},
            "containers": [{"image": "i", "command": "serve", "port": 8000}],
            **({"queue": queue} if queue else {})}  # fmt: skip
    return Service.objects.create(name="sd", spec=spec, workspace=default_workspace())


def _put(service: Service, n: int, priority: int = 0) -> list[QueueItem]:
    queue = store.queue_of(service, "input")
    return [store.put(queue, f"item {i}".encode(), tags={"n": str(i)}, priority=priority)
            for i in range(n)]  # fmt: skip


def test_a_standard_service_has_no_queue():
    plain = Service.objects.create(
        name="chat", workspace=default_workspace(),
        spec={"name": "chat", "containers": [{"image": "i", "command": "c", "port": 8000}]},
    )  # fmt: skip
    with pytest.raises(store.QueueRefusal) as raised:
        store.queue_of(plain, "input")
    assert raised.value.status == 404


def test_puts_are_bounded_by_length_and_size():
    service = _service({"source": {"max_length": 2, "max_payload_size_kb": 1}})
    queue = store.queue_of(service, "input")
    with pytest.raises(store.QueueRefusal) as raised:
        store.put(queue, b"x" * 1025, tags={})
    assert raised.value.status == 413 and "max_payload_size_kb" in raised.value.message
    _put(service, 2)
    with pytest.raises(store.QueueRefusal) as raised:
        store.put(queue, b"one more", tags={})
    assert raised.value.status == 429 and "queue.source.max_length" in raised.value.message
    assert QueueItem.objects.count() == 2  # nothing half-written


def test_leases_fill_each_instance_window_across_gateways_priority_first():
    service = _service(threads=2)
    plain = _put(service, 5)
    (urgent,) = _put(service, 1, priority=1)
    first = store.lease(service, "gw-a", ["sd-0", "sd-1"], 30)
    assert [i.id for i in first][0] == urgent.id and len(first) == 4  # 2 windows of 2
    assert sorted(i.instance for i in first) == ["sd-0", "sd-0", "sd-1", "sd-1"]
    assert store.lease(service, "gw-b", ["sd-0", "sd-1"], 30) == []  # full, whoever asks
    assert store.finish(first[0].id, "gw-a", 200, b"done", "text/plain")
    again = store.lease(service, "gw-b", ["sd-0", "sd-1"], 30)
    assert [i.id for i in again] == [plain[3].id]  # the freed slot, the oldest item
    assert again[0].instance == first[0].instance


def test_an_answer_is_taken_once_from_the_gateway_that_holds_the_item():
    service = _service()
    (item,) = _put(service, 1)
    (leased,) = store.lease(service, "gw-a", ["sd-0"], 30)
    assert not store.finish(item.id, "gw-b", 200, b"not yours", "")
    assert store.finish(item.id, "gw-a", 200, b"answer", "application/json")
    assert not store.finish(item.id, "gw-a", 200, b"twice", "")
    (answer,) = QueueItem.objects.filter(queue="sink")
    assert bytes(answer.data) == b"answer" and answer.request_id == item.request_id
    assert answer.tags == {"n": "0", "requestId": item.request_id, "lastCode": "200",
                           "deliveries": "1"}  # fmt: skip
    assert not QueueItem.objects.filter(queue="input").exists()


def test_an_item_given_back_goes_again_until_max_delivery_then_fails_in_the_sink():
    service = _service({"max_delivery": 2})
    (item,) = _put(service, 1)
    store.lease(service, "gw-a", ["sd-0"], 30)
    assert store.give_back(item.id, "gw-a", "instance sd-0 failed: RemoteProtocolError")
    (again,) = store.lease(service, "gw-a", ["sd-1"], 30)
    assert again.deliveries == 2 and again.instance == "sd-1"
    assert store.give_back(item.id, "gw-a", "instance sd-1 failed: ConnectError")
    (failed,) = QueueItem.objects.filter(queue="sink")
    assert failed.status == 502 and failed.tags["lastCode"] == "502"
    assert "sd-1 failed" in failed.tags["lastMessage"]


def test_an_item_never_sent_goes_again_without_counting_a_delivery():
    service = _service({"max_delivery": 1})
    (item,) = _put(service, 1)
    store.lease(service, "gw", ["sd-0"], 30)
    assert store.give_back(item.id, "gw", "its instance failed before it was sent", False)
    (again,) = store.lease(service, "gw", ["sd-1"], 30)
    assert again.deliveries == 1  # its one delivery is still to come


def test_a_lapsed_lease_goes_to_the_next_gateway_and_the_late_answer_is_dropped():
    service = _service({"max_delivery": 3})
    (item,) = _put(service, 1)
    store.lease(service, "gw-a", ["sd-0"], 30)
    QueueItem.objects.filter(id=item.id).update(lease_until=timezone.now() - timedelta(seconds=1))
    (again,) = store.lease(service, "gw-b", ["sd-0"], 30)
    assert again.holder == "gw-b" and again.deliveries == 2
    assert not store.finish(item.id, "gw-a", 200, b"late", "")
    assert store.renew("gw-b", [item.id], 30) == 1 and store.renew("gw-a", [item.id], 30) == 0


def test_no_lease_while_the_sink_is_full():
    service = _service({"sink": {"max_length": 1}}, threads=1)
    _put(service, 2)
    (first,) = store.lease(service, "gw", ["sd-0"], 30)
    store.finish(first.id, "gw", 200, b"a", "")
    assert store.lease(service, "gw", ["sd-0"], 30) == []  # nowhere to put its answer
    store.get(store.queue_of(service, "sink"), Get(auto_delete=True))  # a caller takes it
    assert len(store.lease(service, "gw", ["sd-0"], 30)) == 1


def test_a_watcher_is_sent_its_window_and_told_what_was_committed():
    service = _service()
    sink = store.queue_of(service, "sink")
    sent = [store.put(sink, f"{i}".encode(), tags={"k": "a" if i % 2 else "b"}) for i in range(6)]
    gone, items = store.watch(sink, 0, (), 3, {})
    assert gone == [] and [i.id for i in items] == [s.id for s in sent[:3]]
    assert store.watch(sink, sent[2].id, tuple(i.id for i in items), 3, {}) == ([], [])
    store.delete(sink, (sent[0].id,))  # committed
    gone, items = store.watch(sink, sent[2].id, tuple(i.id for i in items), 3, {})
    assert gone == [sent[0].id] and [i.id for i in items] == [sent[3].id]
    _, tagged = store.watch(sink, 0, (), 10, {"k": "a"})
    assert [i.id for i in tagged] == [s.id for s in sent[1::2]]


def test_search_says_where_an_item_stands():
    service = _service(threads=1)
    items = _put(service, 3)
    queue = store.queue_of(service, "input")
    assert store.search(queue, items[2].id) == {"ConsumerId": "", "IsPending": False,
                                                "WaitCount": 2}  # fmt: skip
    store.lease(service, "gw", ["sd-0"], 30)
    assert store.search(queue, items[0].id) == {"ConsumerId": "sd-0", "IsPending": True,
                                                "WaitCount": 0}  # fmt: skip
    assert store.search(queue, 999_999) is None
    attributes = store.attributes(queue)
    assert attributes["stream.length"] == "3" and attributes["stream.working"] == "1"
    assert attributes["stream.lastEntry"] == str(items[2].id)
    assert store.backlog(service) == {"pending": 2, "working": 1, "sink": 0}


def test_the_api_shows_an_async_services_queues(api):
    service = _service({"max_delivery": 3}, threads=1)
    items = _put(service, 3)
    store.lease(service, "gw", ["sd-0"], 30)
    store.give_back(items[0].id, "gw", "instance sd-0 failed: ConnectError")
    answer = api.get("/api/v1/services/sd/queue")
    assert answer.status_code == 200, answer.json()
    figures = answer.json()
    assert (figures["window"], figures["max_delivery"]) == (1, 3)
    assert figures["input"] | {"oldest_pending_s": 0} == {
        "pending": 3, "working": 0, "oldest_pending_s": 0, "redelivering": 1,
        "max_length": 10_000, "max_payload_size_kb": 1024}  # fmt: skip
    assert figures["sink"]["length"] == 0
    Service.objects.create(name="chat", workspace=default_workspace(),
                           spec={"name": "chat", "containers": [
                               {"image": "i", "command": "c", "port": 8000}]})  # fmt: skip
    assert api.get("/api/v1/services/chat/queue").status_code == 404
    assert api.get("/api/v1/services/nope/queue").status_code == 404
