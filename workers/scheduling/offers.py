"""Every node as the placement sees it (placement.NodeOffer): its cards, CPUs, memory, disk,
labels, images and cached models, from its row, and whether it takes anything new.

A placing pass needs every node's offer, and reading and decoding every row's JSON each pass
grew with the fleet (51 ms a pass at 500 nodes). A heartbeat that finds its inventory as last
written writes only its time (workers.nodes.node.heartbeat), so the row's inventory_digest
stands while nothing in its offer changed: each process keeps the offers it built by that
digest and reads in full only the rows whose digest moved. A row written without one (""),
as tests and the Kubernetes node sync do, is read in full every time.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from controlplane.nodes.models import Node
from controlplane.nodes.state import READY
from workers.scheduling.placement import Card, NodeOffer

_kept: dict[str, tuple[str, NodeOffer]] = {}  # node -> (its inventory digest, its offer)
_lock = threading.Lock()  # the worker's threads share what is kept


def offers(states: dict[str, str]) -> list[NodeOffer]:
    """The offers of the nodes in `states` (node -> its state this pass), in that state."""
    listed = Node.objects.values_list("name", "inventory_digest")  # all: no list of 500 names
    digests = {name: digest for name, digest in listed if name in states}
    with _lock:
        kept = {name: _kept[name] for name in digests if name in _kept}
    stale = [name for name, digest in digests.items()
             if not digest or kept.get(name, ("",))[0] != digest]  # fmt: skip
    for name in stale:
        kept.pop(name, None)
    for node in Node.objects.filter(name__in=stale):
        offer = _offer(node)
        kept[node.name] = (node.inventory_digest, offer)
        if node.inventory_digest:
            with _lock:
                _kept[node.name] = (node.inventory_digest, offer)
    with _lock:  # nodes gone from the fleet are forgotten
        for name in [name for name in _kept if name not in digests]:
            del _kept[name]
    return [
        offer if states[name] == READY else replace(offer, unschedulable=states[name])
        for name, (_, offer) in sorted(kept.items())
    ]


def _offer(node: Node) -> NodeOffer:
    return NodeOffer(
        name=node.name,
        cards=tuple(Card(c["kind"], c["index"], c.get("memory_mb", 0)) for c in node.cards),
        cpus=node.cpus,
        memory_mb=node.memory_mb,
        disk_mb=node.disk_mb,
        labels=dict(node.labels),
        images=frozenset(node.images),
        models=frozenset(node.cached_models),
    )
