"""Autoscaling decisions: pure, one role of one service at a time (workers.scaling.autoscaling does
the reading and writing).

As EAS and Kubernetes' HPA compute it: for each of the spec's strategies, the metric's
average per ready instance over its threshold gives a count,
``ceil(ready × value / threshold)``, left alone within a 10% tolerance either side, and the
largest count of all strategies is the recommendation. Stabilization keeps it from flapping:
a scale-up goes no higher than the smallest recommendation over the scale-up window (0 s by
default: at once), a scale-down no lower than the largest over the scale-down window (300 s
by default), so a short dip never removes an instance that the next burst needs again.

Scale to zero (min 0): after `onZero.scaleDownGracePeriodSeconds` without a request (none per
second, none in flight, none held), the last instances stop. A request held by a gateway
while none runs wakes the service at once, whatever the windows say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from contracts.spec_cron import Fire
from contracts.spec_scaling import PERCENT, Autoscaler

TOLERANCE = 0.1


@dataclass(frozen=True)
class Signals:
    """What the role's instances see now, summed over them (None: not known now)."""

    ready: int  # instances serving, the denominator of every average
    qps: float | None = None  # requests/s through the gateways
    in_flight: int = 0  # requests at its instances
    queue: float | None = None  # requests waiting in the engines (those with figures)
    kv_cache: float | None = None  # mean KV-cache usage, 0..1, of the engines with figures
    held: int = 0  # requests the gateways hold for it while none runs
    cpu: float | None = None  # mean CPU in use, percent of what each asked for
    gpu: float | None = None  # mean utilisation of their cards, percent
    backlog: int = 0  # an Async service's items waiting in its input queue or in work

    @property
    def traffic(self) -> bool:
        return bool(self.qps) or self.in_flight > 0 or self.held > 0 or self.backlog > 0

    def per_instance(self, metric: str) -> float | None:
        """The metric as a strategy compares it: per ready instance; kv_cache, cpu and gpu as
        the instances' mean, in percent."""
        if metric == "kv_cache":
            return None if self.kv_cache is None else self.kv_cache * 100
        if metric in ("cpu", "gpu", "gpu[util]"):
            return self.cpu if metric == "cpu" else self.gpu
        total = {"qps": self.qps, "concurrency": self.in_flight, "queue": self.queue}[metric]
        if total is None or self.ready == 0:
            return None
        return total / self.ready


@dataclass(frozen=True)
class State:
    """What the autoscaler remembers of a role between passes."""

    replicas: int  # what it asks for
    recommendations: tuple[tuple[float, int], ...] = ()  # (time, count) within the windows
    last_traffic: float = 0.0  # when a request was last seen
    fired: tuple[float, str, int] | None = None  # the cronscaler's fire last applied

    def to_json(self) -> dict:
        return {"replicas": self.replicas, "recommendations": [list(r) for r in
                self.recommendations], "last_traffic": self.last_traffic,
                "fired": list(self.fired) if self.fired else None}  # fmt: skip

    @classmethod
    def from_json(cls, data: object, default: int, now: float) -> State:
        """The remembered state, or a fresh one asking for `default` (its clock starting
        now) when there is none or it is unreadable."""
        try:
            assert isinstance(data, dict)
            return cls(
                replicas=int(data["replicas"]),
                recommendations=tuple((float(t), int(n)) for t, n in data["recommendations"]),
                last_traffic=float(data["last_traffic"]),
                fired=_fired(data.get("fired")),
            )
        except (AssertionError, KeyError, TypeError, ValueError):
            return cls(replicas=default, last_traffic=now)


def _fired(data: object) -> tuple[float, str, int] | None:
    if not isinstance(data, list) or len(data) != 3:
        return None
    return float(data[0]), str(data[1]), int(data[2])


@dataclass(frozen=True)
class Decision:
    replicas: int
    state: State
    reason: str = ""  # the numbers behind a change; "" when the count stays


def decide(
    scaler: Autoscaler, state: State, signals: Signals, now: float, tolerance: float = TOLERANCE
) -> Decision:
    """The count the role should run now, and what to remember for the next pass."""
    current = state.replicas
    last_traffic = now if signals.traffic else state.last_traffic
    wanted, why = _recommend(scaler, current, signals, tolerance)
    behavior = scaler.behavior
    up_window = behavior.scaleUp.stabilizationWindowSeconds
    down_window = behavior.scaleDown.stabilizationWindowSeconds
    keep = max(up_window, down_window)
    history = tuple(r for r in state.recommendations if now - r[0] <= keep) + ((now, wanted),)
    idle, grace = now - last_traffic, behavior.onZero.scaleDownGracePeriodSeconds
    if current == 0 and signals.traffic:
        count = min(max(behavior.onZero.scaleUpActivationReplicas, wanted), scaler.max)
        why = f"{_traffic(signals)} while no instance runs; waking"
    elif scaler.min == 0 and not signals.traffic and idle >= grace:
        count = 0
        why = f"no request for {idle:.0f} s (onZero grace {grace} s)"
    elif wanted > current:
        cap = min(n for t, n in history if now - t <= up_window)
        count = max(current, min(wanted, cap))
        if count < wanted:
            why += f"; held to {count} by the {up_window} s scale-up window"
    elif wanted < current:
        floor = max(n for t, n in history if now - t <= down_window)
        count = min(current, max(wanted, floor))
        if count > wanted:
            why += f"; held to {count} by the {down_window} s scale-down window"
    else:
        count = current
    count = min(max(count, scaler.min), scaler.max)
    new_state = replace(state, replicas=count, recommendations=history, last_traffic=last_traffic)
    return Decision(count, new_state, why if count != current else "")


def _recommend(
    scaler: Autoscaler, current: int, signals: Signals, tolerance: float
) -> tuple[int, str]:
    """The largest count the strategies ask for (at least 1: zero is the idle rule's), and
    why; the current count when no strategy has a figure."""
    best, why = None, ""
    for strategy in scaler.scaleStrategies:
        value = signals.per_instance(strategy.metricName)
        if value is None:
            continue
        ratio = value / strategy.threshold
        if abs(ratio - 1) <= tolerance:  # close enough: no change on its account
            ratio = 1.0
        count = max(math.ceil(signals.ready * ratio - 1e-9), 1)
        if best is None or count > best:
            best = count
            unit = "%" if strategy.metricName in PERCENT else "/instance"
            why = (f"{strategy.metricName} {value:.2f}{unit} against {strategy.threshold:g} "
                   f"over {signals.ready} ready → {count}")  # fmt: skip
    if best is None:
        return max(current, 1) if signals.traffic else current, "no figures yet"
    return best, why


def _traffic(signals: Signals) -> str:
    parts = []
    if signals.held:
        parts.append(f"{signals.held} request(s) held")
    if signals.qps:
        parts.append(f"{signals.qps:.2f} requests/s")
    if signals.in_flight:
        parts.append(f"{signals.in_flight} in flight")
    if signals.backlog:
        parts.append(f"{signals.backlog} item(s) in its queue")
    return ", ".join(parts)


def scheduled(
    state: State, fire: Fire | None, low: int, high: int, now: float
) -> tuple[State, int | None, str]:
    """A cronscaler's part (contracts.spec_cron): the state after the latest `fire` (applied
    once: the count becomes its target within low..high, the windows start again), the floor
    it sets for an autoscaler until the next fire (None: no schedule), and why, when it fired
    now."""
    if fire is None:
        return replace(state, fired=None), None, ""
    target = min(max(fire.target, low), high)
    key = (fire.at, fire.job, fire.target)
    if state.fired == key:
        return state, target, ""
    why = f"cronscaler job {fire.job} → {fire.target}"
    if target != fire.target:
        why += f" (held to {target} by the autoscaler's {low}..{high})"
    return replace(state, replicas=target, recommendations=((now, target),), fired=key), target, why
