from __future__ import annotations

from django.conf import settings
from django.db import models

from contracts.canary import ACTIVE as CANARY_ACTIVE
from contracts.canary import PAUSED as CANARY_PAUSED
from contracts.canary import RUNNING as CANARY_RUNNING
from contracts.canary import STARTING as CANARY_STARTING
from contracts.canary import STATES as CANARY_STATES
from contracts.engine_keys import engine_key
from contracts.service_groups import AUTO, DEFAULT_WEIGHT, STANDALONE, TRAFFIC_MODES, TRAFFIC_STATES
from contracts.spec import ServiceSpec, SpecError, parse_spec
from controlplane.services.choices import DesiredState, InstanceState, Phase
from controlplane.services.sealing import unseal


class Service(models.Model):
    """Desired state (spec, desired_state, generation) written by the API; observed state
    (phase, ready_instances, observed_generation, progress, last_error) by the reconciler."""

    name = models.CharField(max_length=63, unique=True)
    spec = models.JSONField()
    generation = models.PositiveIntegerField(default=1)
    desired_state = models.CharField(
        max_length=16, choices=DesiredState.choices, default=DesiredState.RUNNING
    )
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PENDING)
    observed_generation = models.PositiveIntegerField(default=0)
    ready_instances = models.PositiveIntegerField(default=0)
    progress = models.CharField(max_length=200, blank=True)
    last_error = models.TextField(blank=True)
    # Written by the autoscaler alone (workers.scaling.autoscaling): per autoscaled role ("" without
    # prefill/decode roles), the count it decided and what it remembers for its windows.
    autoscale = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Names are unique across workspaces: the gateway routes by them.
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.PROTECT, related_name="services"
    )
    # Its service group (metadata.group, contracts.service_groups), kept in step with the spec
    # by controlplane.services.groups; whether it takes the group's traffic, and its weight.
    group = models.ForeignKey(
        "ServiceGroup", null=True, blank=True, on_delete=models.SET_NULL, related_name="members"
    )
    traffic_state = models.CharField(
        max_length=16, choices=[(s, s) for s in TRAFFIC_STATES], default=STANDALONE
    )
    group_weight = models.PositiveSmallIntegerField(default=DEFAULT_WEIGHT)
    # EAS's ServiceMirror: {"targets": [service, ...], "ratio": percent}; {} for none
    # (controlplane.services.api.mirror, gateway.routing.mirror).
    mirror = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def plain_spec(self) -> dict:
        """The stored spec with its secrets opened (they are sealed at rest)."""
        return unseal(self.spec)

    def parsed_spec(self) -> ServiceSpec:
        return parse_spec(self.plain_spec())


class ModelName(models.Model):
    """A model id a live service answers to (contracts.spec_facts.model_ids): unique
    platform-wide, so two services never hold one however their writes interleave
    (controlplane.services.names). A deleted service's are let go at once."""

    name = models.CharField(max_length=400, unique=True)
    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="model_names")

    def __str__(self) -> str:
        return self.name


class ServiceGroup(models.Model):
    """A service group (EAS's): it exists while a live service names it (metadata.group).
    Its name shares the services' namespace: the gateway routes /api/predict/<name> to it."""

    name = models.CharField(max_length=63, unique=True)
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.PROTECT, related_name="service_groups"
    )
    traffic_mode = models.CharField(
        max_length=16, choices=[(m, m) for m in TRAFFIC_MODES], default=AUTO
    )
    # The header that keeps a caller's session on one member ("": the default's).
    session_header = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ServiceVersion(models.Model):
    """Every spec a service has had, numbered from 1; a rollback copies an old one forward."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()
    spec_hash = models.CharField(max_length=16)
    note = models.CharField(max_length=200, blank=True)  # "created", "updated", "rollback to 3"
    # The commit each hub model of the spec (hf://, modelscope://) was staged at: {ref: commit},
    # recorded when a node first resolves the revision (workers.models.hub_pins), so that every
    # instance of this version, on any node and later, serves the same bytes.
    hub_commits = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["service", "number"], name="one_number_per_version")
        ]


class Instance(models.Model):
    """One instance: where the scheduler placed it (node, cards, spec) and, written by that
    node's agent, what it observes there (state, url, probes, restarts)."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="instances")
    name = models.CharField(max_length=128, unique=True)
    role = models.CharField(max_length=16, blank=True, help_text="prefill | decode | ''")
    pd_index = models.PositiveIntegerField(default=0)  # its number within its role
    runtime = models.CharField(max_length=16)
    node = models.CharField(max_length=128)  # the name of the node it runs on
    devices = models.CharField(max_length=200, blank=True, help_text="its cards: gpu:0,1")
    # A prefill/decode instance's ports on its node, fixed at placement (WHARF_PD_PORTS) so its
    # peers' rank tables and KV wiring can name them before it starts: where its engine
    # serves and where its KV side channel listens. Null for other instances.
    port = models.PositiveIntegerField(null=True, blank=True)
    kv_port = models.PositiveIntegerField(null=True, blank=True)
    # An instance across hosts (the spec's unit.size N > 1; workers.scheduling.gang) is N rows, one
    # per member and node, sharing `gang` (the leader's name); `rank` 0 is the leader, which serves
    # HTTP, and its row holds the rendezvous port (from its node's WHARF_PD_PORTS range) that
    # every member meets at. "" and 0 for an instance on one host.
    gang = models.CharField(max_length=128, blank=True, db_index=True)
    rank = models.PositiveSmallIntegerField(default=0)
    master_port = models.PositiveIntegerField(null=True, blank=True)
    spec_hash = models.CharField(max_length=16)
    # What its engine key derives from where not its name (the pods of a Kubernetes
    # Deployment share their Deployment's key): contracts.engine_keys, contracts.routing.
    engine_key_name = models.CharField(max_length=128, blank=True)
    # Its LoRA adapters (workers.models.adapters): {"generation": the service's, "loaded": [names],
    # "failed": {name: why}, "at": epoch seconds}; {} where the node does not track them (the
    # spec's adapters are then all it serves).
    adapters = models.JSONField(default=dict, blank=True)
    # "canary": an instance of its service's canary release (contracts.canary), "": its own.
    track = models.CharField(max_length=16, blank=True)
    state = models.CharField(max_length=16, choices=InstanceState.choices)
    url = models.CharField(max_length=200, blank=True)
    message = models.TextField(blank=True)
    # Written by the node's agent: probes, restarts and their back-off.
    started_at = models.DateTimeField(null=True, blank=True)  # this run of its engine
    ready_since = models.DateTimeField(null=True, blank=True)
    probe_failures = models.PositiveIntegerField(default=0)  # in a row, readiness
    probe_successes = models.PositiveIntegerField(default=0)  # in a row, readiness
    liveness_failures = models.PositiveIntegerField(default=0)  # in a row
    probed_at = models.DateTimeField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)  # since it last stayed up 10 minutes
    restart_at = models.DateTimeField(null=True, blank=True)  # back-off: not before then
    # Written by the scheduler: out of routing since then; stopped once drained.
    draining_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def engine_key(self) -> str:
        """The key its engine (or the engine's front, gateway.front) lets callers in with."""
        return engine_key(settings.WHARF_TOKEN_KEY.encode(), self.engine_key_name or self.name)

    def placed_spec(self) -> ServiceSpec | None:
        """The spec this instance was placed for: the service's current one, or the kept
        version with its hash (an instance of the previous version while a rollout runs)."""
        try:
            spec = self.service.parsed_spec()
            if spec.spec_hash() == self.spec_hash:
                return spec
        except SpecError:
            pass
        if self.track:  # a canary's instance: its release holds the spec
            canary = Canary.objects.filter(service=self.service_id, spec_hash=self.spec_hash)
            kept_canary = canary.order_by("-pk").first()
            try:
                return parse_spec(unseal(kept_canary.spec)) if kept_canary else None
            except SpecError:
                return None
        version = ServiceVersion.objects.filter(service=self.service_id, spec_hash=self.spec_hash)
        kept = version.first()
        try:
            return parse_spec(unseal(kept.spec)) if kept else None
        except SpecError:
            return None


class Event(models.Model):
    """Append-only: one row per transition, newest shown first in the console."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="events")
    instance = models.CharField(max_length=128, blank=True)
    reason = models.CharField(max_length=64)
    message = models.TextField()
    actor = models.CharField(max_length=300, blank=True, help_text="who asked; '' for Wharf")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class Canary(models.Model):
    """A canary release of a service (contracts.canary): a new spec run beside the stable one,
    its share of the calls raised step by step while the gateways' figures of both sides stay
    within its bounds. Written by the API (start, pause, resume, promote, abort) and by the
    canary controller (workers.scheduling.canaries)."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="canaries")
    spec = models.JSONField(help_text="the new version's spec, sealed as a service's is")
    spec_hash = models.CharField(max_length=16)
    steps = models.JSONField(help_text="rising percentages of the calls, ending at 100")
    step = models.PositiveSmallIntegerField(default=0)
    interval_s = models.PositiveIntegerField(default=60)
    max_error_rate = models.FloatField(default=0.01)
    max_ttft_ratio = models.FloatField(default=1.5)
    max_itl_ratio = models.FloatField(default=1.3)
    min_requests = models.PositiveIntegerField(default=50)
    state = models.CharField(
        max_length=16, choices=[(s, s) for s in CANARY_STATES], default=CANARY_STARTING
    )
    step_started_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField(blank=True, help_text="the last judgement, in words")
    figures = models.JSONField(default=dict, blank=True, help_text="both sides, last judged")
    actor = models.CharField(max_length=300, blank=True, help_text="who started it")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["service"], condition=models.Q(state__in=CANARY_ACTIVE),
                name="one_active_canary_per_service",
            )
        ]  # fmt: skip

    @property
    def weight(self) -> int:
        """The canary's share of the calls now, percent."""
        if self.state not in (CANARY_RUNNING, CANARY_PAUSED) or self.step_started_at is None:
            return 0  # starting (or paused before it ran): the stable side takes every call
        return int(self.steps[min(self.step, len(self.steps) - 1)])
