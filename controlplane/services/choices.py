"""Lifecycle states, grouped the way the reconciler and the API reason about them."""

from django.db import models


class DesiredState(models.TextChoices):
    RUNNING = "running"
    STOPPED = "stopped"
    DELETED = "deleted"


class Phase(models.TextChoices):
    PENDING = "pending"
    DEPLOYING = "deploying"
    RUNNING = "running"
    UPDATING = "updating"
    DEGRADED = "degraded"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DELETING = "deleting"
    FAILED = "failed"
    COMPLETED = "completed"  # a job (metadata.workload_type) whose every instance succeeded


class InstanceState(models.TextChoices):
    """An instance's life, as the README's state table tells it."""

    CREATING = "creating"  # placed on a node; its agent stages the model and starts it
    STARTING = "starting"  # its engine runs; readiness not passed yet
    READY = "ready"  # readiness passes: routed
    UNHEALTHY = "unhealthy"  # readiness failing: out of routing until it passes again
    BACKOFF = "backoff"  # exited or failed liveness; restarts after its back-off
    FAILED = "failed"  # cannot start as specified (missing image, model); the spec must change
    UNKNOWN = "unknown"  # its node stopped answering
    DRAINING = "draining"  # out of routing; stopped once its requests finish or grace ends
    SUCCEEDED = "succeeded"  # a job's instance whose command exited 0: kept as it ended
