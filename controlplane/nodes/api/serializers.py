from __future__ import annotations

from collections import defaultdict

from rest_framework import serializers

from contracts.allocation import decode_allocation
from controlplane.nodes.models import Node
from controlplane.services.models import Instance


def cards_in_use(instances) -> dict[tuple[str, int], str]:
    """(kind, index) -> the instance holding that card, from the instances' recorded cards."""
    held = {}
    for instance in instances:
        if instance.devices:
            kind, indexes = decode_allocation(instance.devices)
            held.update({(kind, index): instance.name for index in indexes})
    return held


OTHER = "(another workspace's)"  # a card held by an instance the caller may not see


class NodeSerializer(serializers.ModelSerializer):
    state = serializers.CharField(read_only=True)
    cards = serializers.SerializerMethodField()
    card_counts = serializers.SerializerMethodField()
    instances = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "state", "address", "labels", "cordoned", "draining", "cards",
                  "card_counts", "cpus", "memory_mb", "runtime", "images", "cached_models",
                  "version", "heartbeat_at", "registered_at", "instances"]  # fmt: skip

    def _instances(self, node: Node) -> list[Instance]:
        by_node = self.context.setdefault("instances_by_node", {})
        if not by_node:
            for instance in Instance.objects.select_related("service"):
                by_node.setdefault(instance.node, []).append(instance)
        return by_node.get(node.name, [])

    def _shown(self, instance: Instance) -> bool:
        """Staff see every instance; others those of their workspace (context `workspace`)."""
        workspace = self.context.get("workspace")
        return workspace is None or instance.service.workspace_id == workspace

    def get_cards(self, node: Node) -> list[dict]:
        instances = self._instances(node)
        held = cards_in_use(instances)
        hidden = {i.name for i in instances if not self._shown(i)}
        return [{**card, "instance": OTHER if held.get(key) in hidden else held.get(key)}
                for card in node.cards
                for key in [(card.get("kind"), card.get("index"))]]  # fmt: skip

    def get_card_counts(self, node: Node) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = defaultdict(lambda: {"total": 0, "used": 0})
        for card in self.get_cards(node):
            counts[card["kind"]]["total"] += 1
            counts[card["kind"]]["used"] += card["instance"] is not None
        return {kind: {**c, "free": c["total"] - c["used"]} for kind, c in counts.items()}

    def get_instances(self, node: Node) -> list[dict]:
        return [{"name": i.name, "service": i.service.name, "role": i.role, "state": i.state,
                 "cards": i.devices} for i in self._instances(node) if self._shown(i)]  # fmt: skip
