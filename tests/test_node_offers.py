"""The nodes' offers a placing pass reads (workers.scheduling.offers): built from the rows the
heartbeats wrote, kept by each row's inventory digest, and read again in full only when a
heartbeat changed the inventory or the row has no digest."""

from __future__ import annotations

import pytest
from django.utils import timezone

from controlplane.nodes.models import Node
from controlplane.nodes.state import CORDONED, READY
from workers.nodes import node as host
from workers.nodes.devices import Device, DeviceCache
from workers.runtimes.memory import MemoryRuntime
from workers.scheduling import offers
from workers.scheduling.placement import Card

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh(monkeypatch, settings, tmp_path):
    monkeypatch.setattr(offers, "_kept", {})  # nothing kept from another test's rows
    cards = [Device("gpu", i, "NVIDIA H200", 143771) for i in range(2)]
    monkeypatch.setattr(host, "CARDS", DeviceCache(lambda: cards, ttl=1e9))
    settings.WHARF_MODEL_DIR, settings.WHARF_CACHE_DIR = tmp_path / "models", tmp_path / "cache"


def beat(settings, name: str, labels: str = "") -> bool:
    settings.WHARF_NODE_NAME, settings.WHARF_NODE_LABELS = name, labels
    settings.WHARF_NODE_ADDRESS = f"10.0.0.{name[-1]}"
    return host.heartbeat(MemoryRuntime(node=name, address=settings.WHARF_NODE_ADDRESS))


def test_offers_are_kept_until_a_heartbeat_changes_the_inventory(
    settings, django_assert_num_queries
):
    beat(settings, "n1", "zone=a")
    beat(settings, "n2")
    with django_assert_num_queries(2):  # the digests, then both rows in full
        first = offers.offers({"n1": READY, "n2": CORDONED})
    assert [(o.name, o.labels, o.unschedulable) for o in first] == [
        ("n1", {"zone": "a"}, ""), ("n2", {}, CORDONED),
    ]  # fmt: skip
    assert first[0].cards == (Card("gpu", 0, 143771), Card("gpu", 1, 143771))
    assert not beat(settings, "n1", "zone=a")  # the same inventory: its time alone
    with django_assert_num_queries(1):  # the digests alone: every offer kept
        kept = offers.offers({"n1": CORDONED, "n2": READY})
    assert [(o.name, o.labels, o.unschedulable) for o in kept] == [
        ("n1", {"zone": "a"}, CORDONED), ("n2", {}, ""),
    ]  # fmt: skip
    assert beat(settings, "n1", "zone=b")  # a new label
    with django_assert_num_queries(2):  # the digests, then n1's row alone
        changed = offers.offers({"n1": READY, "n2": READY})
    assert [o.labels for o in changed] == [{"zone": "b"}, {}]


def test_rows_without_a_digest_are_read_every_time_and_gone_nodes_are_forgotten(
    settings, django_assert_num_queries
):
    beat(settings, "n1")
    Node.objects.create(name="n2", address="10.0.0.2", cpus=8, heartbeat_at=timezone.now())
    offers.offers({"n1": READY, "n2": READY})
    Node.objects.filter(name="n2").update(cpus=16)  # written as tests and the cluster sync do
    with django_assert_num_queries(2):
        again = offers.offers({"n1": READY, "n2": READY})
    assert [(o.name, o.cpus) for o in again][1] == ("n2", 16)
    assert set(offers._kept) == {"n1"}
    Node.objects.filter(name="n1").delete()
    assert [o.name for o in offers.offers({"n2": READY})] == ["n2"]
    assert offers._kept == {}
