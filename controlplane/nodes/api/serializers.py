from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.conf import settings
from rest_framework import serializers

from contracts.allocation import decode_allocation
from contracts.engines import default_images
from contracts.hub_refs import is_hub_ref
from contracts.spec import SpecError, typed_spec
from contracts.spec_facts import model_refs
from controlplane.nodes.models import Node
from controlplane.services import spec_memo
from controlplane.services.choices import DesiredState
from controlplane.services.models import Instance, Service


def cards_in_use(instances) -> dict[tuple[str, int], str]:
    """(kind, index) -> the instance holding that card, from the instances' recorded cards."""
    held = {}
    for instance in instances:
        if instance.devices:
            kind, indexes = decode_allocation(instance.devices)
            held.update({(kind, index): instance.name for index in indexes})
    return held


OTHER = "(another workspace's)"  # a card held by an instance the caller may not see


def workspace_uses(workspace_id: int) -> tuple[set[str], set[str]]:
    """(images, models) a workspace's live services name: each container image (the engine's
    own when none is given) and each model reference (a hub one without its revision)."""
    images: set[str] = set()
    models: set[str] = set()
    services = Service.objects.filter(workspace_id=workspace_id).exclude(
        desired_state=DesiredState.DELETED)  # fmt: skip
    for _, (named_images, named_models) in spec_memo.each(services, _uses):
        images |= named_images
        models |= named_models
    return images, models


def _uses(service: Service) -> tuple[frozenset[str], frozenset[str]]:
    """The images and models one service names (kept per generation: spec_memo)."""
    try:
        spec = typed_spec(service.spec)
    except SpecError:
        return frozenset(), frozenset()
    images: set[str] = set()
    container = spec.containers[0] if spec.containers else None
    if container and container.image:
        images.add(container.image)
    elif spec.llm is not None:
        images.add(settings.WHARF_VLLM_CPU_IMAGE if spec.llm.engine == "vllm-cpu"
                   else default_images().get(spec.llm.engine, ""))  # fmt: skip
    images.update(c.image for c in spec.containers[1:] if c.image)  # its sidecars'
    models = {ref.split("@", 1)[0] if is_hub_ref(ref) else ref for _, ref in model_refs(spec)}
    return frozenset(images), frozenset(models)


def instances_by_node(nodes: Iterable[Node]) -> dict[str, list[Instance]]:
    """The instances on these nodes, by node name: one query for a page of nodes, not a read
    of the whole fleet's."""
    by_node: dict[str, list[Instance]] = {node.name: [] for node in nodes}
    rows = Instance.objects.filter(node__in=list(by_node)).select_related("service")
    for instance in rows.only(*_SHOWN):  # not the service's spec, nor the rows' clocks
        by_node[instance.node].append(instance)
    return by_node


# What a node's page reads of each of its instances (NodeSerializer).
_SHOWN = ("name", "node", "role", "state", "devices", "service__name", "service__workspace_id")


class NodeSerializer(serializers.ModelSerializer):
    """What a node offers. Its images and cached models are shared ground: staff see them all;
    others only those their own workspace's services name (another workspace's private image
    tags and models are not theirs to learn)."""

    state = serializers.CharField(read_only=True)
    cards = serializers.SerializerMethodField()
    card_counts = serializers.SerializerMethodField()
    instances = serializers.SerializerMethodField()
    images = serializers.SerializerMethodField()
    cached_models = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "state", "address", "labels", "cordoned", "draining", "cards",
                  "card_counts", "cpus", "memory_mb", "disk_mb", "runtime", "images",
                  "cached_models", "version", "heartbeat_at", "registered_at",
                  "instances"]  # fmt: skip

    def _instances(self, node: Node) -> list[Instance]:
        """Its instances: from the context's `instances_by_node` (a page's, read at once by
        the view), else read for this node alone."""
        by_node = self.context.setdefault("instances_by_node", {})
        if node.name not in by_node:
            by_node.update(instances_by_node([node]))
        return by_node[node.name]

    def _uses(self) -> tuple[set[str], set[str]] | None:
        """The caller's workspace's images and models; None for staff (everything)."""
        workspace = self.context.get("workspace")
        if workspace is None:
            return None
        if "uses" not in self.context:
            self.context["uses"] = workspace_uses(workspace)
        return self.context["uses"]

    def get_images(self, node: Node) -> list[str]:
        uses = self._uses()
        return list(node.images) if uses is None else [i for i in node.images if i in uses[0]]

    def get_cached_models(self, node: Node) -> list[str]:
        uses = self._uses()
        return list(node.cached_models) if uses is None else [
            m for m in node.cached_models if m in uses[1]]  # fmt: skip

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
