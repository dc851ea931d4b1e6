"""The spec's scaling and routing sections: `autoscaler` (EAS's shape) and the routing policy
in `metadata.rpc`. Neither shapes an instance, so neither is part of the spec hash: the
autoscaler changes how many instances run, the routing policy where the gateway sends each
request.

    "autoscaler": {"min": 1, "max": 8,
                   "scaleStrategies": [{"metricName": "qps", "threshold": 10}],
                   "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                                "scaleDown": {"stabilizationWindowSeconds": 300},
                                "onZero": {"scaleDownGracePeriodSeconds": 600}}}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contracts.spec_fleet import MAX_INSTANCES, _Strict

# What a scale strategy can follow, each per instance of the service (or of its role):
# qps: requests per second through the gateways; concurrency: requests in flight;
# queue: requests waiting in the engine (an Async service: the items waiting in its input queue
# or in work, contracts.spec_queue); kv_cache: the engine's KV-cache usage, in percent;
# cpu: CPU in use, in percent of metadata.cpu (of one core when unset); gpu (EAS also writes
# gpu[util]): its cards' utilisation, in percent (contracts.instance_usage).
METRICS = ("qps", "concurrency", "queue", "kv_cache", "cpu", "gpu", "gpu[util]")
PERCENT = ("kv_cache", "cpu", "gpu", "gpu[util]")
HEADER = r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$"


class ScaleStrategy(_Strict):
    metricName: Literal[  # noqa: N815
        "qps", "concurrency", "queue", "kv_cache", "cpu", "gpu", "gpu[util]"
    ] = Field(
        description="qps, concurrency and queue per instance (an Async service's queue: "
        "items waiting or in work); kv_cache in percent of the "
        "engine's KV cache; cpu in percent of metadata.cpu (one core when unset); gpu (or "
        "gpu[util]) in percent of its cards' utilisation."
    )
    threshold: float = Field(
        gt=0, le=1_000_000,
        description="Scale out when the average per instance is above it (10% tolerance), "
        "in when below.",
    )  # fmt: skip

    @model_validator(mode="after")
    def _percent(self) -> ScaleStrategy:
        if self.metricName in ("kv_cache", "gpu", "gpu[util]") and self.threshold > 100:
            raise ValueError(f"a {self.metricName} threshold is a percentage: at most 100")
        return self


class ScaleWindow(_Strict):
    stabilizationWindowSeconds: int = Field(default=0, ge=0, le=3600)  # noqa: N815


class OnZero(_Strict):
    scaleDownGracePeriodSeconds: int = Field(  # noqa: N815
        default=600, ge=0, le=86_400,
        description="With min 0: seconds without a request before the last instance stops.",
    )  # fmt: skip
    scaleUpActivationReplicas: int = Field(  # noqa: N815
        default=1, ge=1, le=MAX_INSTANCES,
        description="Instances started at once when a request arrives while none runs.",
    )  # fmt: skip


class Behavior(_Strict):
    scaleUp: ScaleWindow = ScaleWindow()  # noqa: N815
    scaleDown: ScaleWindow = ScaleWindow(stabilizationWindowSeconds=300)  # noqa: N815
    onZero: OnZero = OnZero()  # noqa: N815


class Autoscaler(_Strict):
    """EAS's horizontal autoscaler. `metadata.instance` (or a role's `instance`) is the count
    a service starts with."""

    min: int = Field(ge=0, le=MAX_INSTANCES, description="0: stop every instance when idle.")
    max: int = Field(ge=1, le=MAX_INSTANCES)
    scaleStrategies: list[ScaleStrategy] = Field(min_length=1, max_length=4)  # noqa: N815
    behavior: Behavior = Behavior()

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaler:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        names = [s.metricName.removesuffix("[util]") for s in self.scaleStrategies]
        if len(set(names)) != len(names):
            raise ValueError("give each metricName once")
        return self


RoutingPolicy = Literal["least_outstanding", "prefix_cache", "kv_cache_load", "session"]
ROUTING = (
    "least_outstanding: fewest requests in flight; prefix_cache: requests sharing a prompt "
    "prefix go to the instance that has it cached, while its load stays within a bound of the "
    "least loaded; kv_cache_load: the engines' KV-cache usage and waiting requests; session: "
    "the instance a session (rpc.session_header) was first sent to. In a prefill/decode "
    "service, the prefill leg's policy."
)
