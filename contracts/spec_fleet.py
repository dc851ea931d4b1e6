"""The spec's fleet sections: how a service's instances are replaced (`rolling_strategy`) and
probed (`health_check`). The reconciler applies both to running instances without restarting
them, so neither is part of `ServiceSpec.spec_hash()`. Nor is `dockerAuth`, the registry
credentials a node pulls a missing image with: they do not change the container.

The strict base every spec model shares lives here too, because `spec.py` imports this module
(and re-exports what it needs from it).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

MAX_STRING = 1024  # any string without a bound of its own
MAX_INSTANCES = 64  # instances per service or role
PERCENT = r"^\d{1,3}%$"
STEP = f"give a whole number 0..{MAX_INSTANCES} or a percentage from '0%' to '100%'"
# An HTTP path on the engine's port: no spaces, query, fragment or '..'.
PROBE_PATH = r"^/[A-Za-z0-9._~/-]*$"
MAX_DOCKER_AUTH = 8192  # registry tokens (ECR's, a JSON key's) run to a few KB
DOCKER_AUTH = 'give base64 of "user:password" (printf %s user:password | base64 -w0)'


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, str_strip_whitespace=True, str_max_length=MAX_STRING,
        allow_inf_nan=False,
    )  # fmt: skip


Step = Annotated[int, Field(ge=0, le=MAX_INSTANCES)] | Annotated[str, Field(pattern=PERCENT)]


def _is_zero(step: int | str) -> bool:
    return (int(step[:-1]) if isinstance(step, str) else step) == 0


def _scaled(step: int | str, replicas: int, round_up: bool) -> int:
    if isinstance(step, int):
        return step
    share = int(step[:-1]) * replicas  # in hundredths of an instance
    return -(-share // 100) if round_up else share // 100


class RollingStrategy(_Strict):
    """How an update replaces instances (EAS rolling_strategy, Kubernetes' rolling update)."""

    max_surge: Step = Field(
        default=1,
        description="Instances started above the desired count during an update: a number, "
        "or a percentage of the desired count rounded up.",
    )
    max_unavailable: Step = Field(
        default=0,
        description="Instances of the desired count that may be unavailable during an "
        "update: a number, or a percentage of the desired count rounded down.",
    )

    @field_validator("max_surge", "max_unavailable", mode="wrap")
    @classmethod
    def _step(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> int | str:
        try:
            step = handler(value)
        except ValidationError:
            raise ValueError(STEP) from None
        if isinstance(step, str) and int(step[:-1]) > 100:
            raise ValueError(STEP)
        return step

    @model_validator(mode="after")
    def _can_start(self) -> RollingStrategy:
        if _is_zero(self.max_surge) and _is_zero(self.max_unavailable):
            raise ValueError(
                "max_surge and max_unavailable cannot both be 0: the update could never start"
            )
        return self

    def resolve(self, replicas: int) -> tuple[int, int]:
        """(surge, unavailable) as instance counts for `replicas` desired instances, the way
        Kubernetes resolves them: a surge percentage rounds up, an unavailable one down. When
        both come to 0 for a non-empty service, surge is 1 (Kubernetes makes unavailable 1
        instead; Wharf never gives up capacity the spec did not allow)."""
        if replicas < 0:
            raise ValueError("replicas cannot be negative")
        surge = _scaled(self.max_surge, replicas, round_up=True)
        unavailable = _scaled(self.max_unavailable, replicas, round_up=False)
        if surge == 0 and unavailable == 0 and replicas > 0:
            surge = 1
        return surge, unavailable


def _probe_path(value: str) -> str:
    if ".." in value:
        raise ValueError("a health-check path must not contain '..'")
    return value


def _within_period(value: int, info: ValidationInfo) -> int:
    period = info.data.get("period_seconds")
    if period is not None and value > period:
        raise ValueError(f"timeout_seconds ({value}) cannot exceed period_seconds ({period})")
    return value


ProbePath = Annotated[
    Annotated[str, Field(max_length=256, pattern=PROBE_PATH), AfterValidator(_probe_path)] | None,
    Field(description="HTTP path probed on the engine's port; none: the engine's own check."),
]
InitialDelay = Annotated[
    int, Field(ge=0, le=3600, description="Seconds after start before the first probe.")
]
Period = Annotated[int, Field(ge=1, le=300, description="Seconds between probes.")]
ProbeTimeout = Annotated[
    int,
    Field(ge=1, le=300, description="Seconds a probe may take; at most period_seconds."),
    AfterValidator(_within_period),
]


class Liveness(_Strict):
    """Liveness probe: an instance failing it is restarted."""

    path: ProbePath = None
    initial_delay_seconds: InitialDelay = 0
    period_seconds: Period = 10
    timeout_seconds: ProbeTimeout = 2
    failure_threshold: int = Field(
        default=3, ge=1, le=100,
        description="Consecutive failed probes after which the instance is restarted.",
    )  # fmt: skip


class HealthCheck(_Strict):
    """Readiness probe: an instance failing it is only taken out of routing (not restarted);
    `liveness` is the probe that restarts it."""

    path: ProbePath = None
    initial_delay_seconds: InitialDelay = 0
    period_seconds: Period = 5
    timeout_seconds: ProbeTimeout = 2
    failure_threshold: int = Field(
        default=3, ge=1, le=100,
        description="Consecutive failed probes after which the instance is taken out of "
        "routing; it is not restarted.",
    )  # fmt: skip
    success_threshold: int = Field(
        default=1, ge=1, le=100,
        description="Consecutive passed probes after which the instance is routed to again.",
    )  # fmt: skip
    startup_timeout_seconds: int | None = Field(
        default=None, ge=10, le=86400,
        description="Seconds a new instance has to become ready before it counts as failed; "
        "none: the server's WHARF_HEALTH_TIMEOUT.",
    )  # fmt: skip
    liveness: Liveness | None = Field(
        default=None,
        description="Liveness probe: failing it restarts the instance. None: instances are "
        "restarted only when they exit.",
    )


def docker_credentials(value: str) -> tuple[str, str]:
    """(user, password) from EAS's dockerAuth, base64 of "user:password". Its errors never
    quote the value: it is a secret."""
    try:
        text = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError(DOCKER_AUTH) from None
    user, colon, password = text.partition(":")
    if not colon or not user or not password or any(ord(c) < 32 or c == "\x7f" for c in text):
        raise ValueError(DOCKER_AUTH)
    return user, password


def _docker_auth(value: str) -> str:
    docker_credentials(value)
    return value


DockerAuth = Annotated[
    Annotated[str, Field(min_length=1, max_length=MAX_DOCKER_AUTH), AfterValidator(_docker_auth)]
    | None,
    Field(
        repr=False,  # a secret: out of every repr, so out of logs
        description="Credentials for a private image registry, as EAS takes them: base64 of "
        '"user:password". A node pulls a missing image with them; none: with its own `docker '
        "login`. Never shown by the API.",
    ),
]
