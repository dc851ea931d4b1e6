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


class InstanceState(models.TextChoices):
    CREATING = "creating"
    STARTING = "starting"
    READY = "ready"
    UNHEALTHY = "unhealthy"
    EXITED = "exited"
    FAILED = "failed"
