"""What an instance uses of its node, sampled by the node (workers.scaling.usage_sampler) for the
autoscaler's `cpu` and `gpu` strategies. No Django: both sides read it.

Redis, per instance (its name): ``wharf:instance-usage:<instance>``, the newest sample's JSON,
expiring after ``STALE`` seconds (an instance whose runtime gives no figures, or that is gone,
has none):

    {"at": 1717000000.5,   # unix seconds when it was taken
     "cpu_cores": 1.6,     # CPU time used per second of wall time since the last sample
     "gpu_util": 73.0}     # mean utilisation of its cards, percent (left out: no cards)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

PREFIX = "wharf:instance-usage:"  # not wharf:usage:, the keys' usage by minute (contracts.usage)
STALE = 10  # seconds a sample counts


def key(instance: str) -> str:
    return PREFIX + instance


def encode(sample: Mapping[str, float]) -> str:
    return json.dumps(dict(sample), separators=(",", ":"))


def decode(raw: bytes | str | None) -> dict[str, float] | None:
    """A sample, or None for nothing or anything unreadable."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("at"), int | float):
        return None
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}


def cores_used(before: tuple[float, float] | None, now: tuple[float, float]) -> float | None:
    """CPU cores in use between two (wall seconds, CPU seconds) readings; None with no
    earlier reading, or when the counter went back (the instance restarted)."""
    if before is None:
        return None
    wall, cpu = now[0] - before[0], now[1] - before[1]
    if wall <= 0 or cpu < 0:
        return None
    return cpu / wall


def mean_utilisation(cards: Sequence[int], utilisation: Mapping[int, float]) -> float | None:
    """The mean utilisation (percent) of `cards`; None when any of them has no figure."""
    if not cards or any(card not in utilisation for card in cards):
        return None
    return sum(utilisation[card] for card in cards) / len(cards)


def cpu_percent(cores: float, requested: float | None) -> float:
    """`cores` in use as a percentage of what the instance asked for (metadata.cpu; one core
    when it asked for none), as Kubernetes' HPA measures CPU against the request."""
    return cores / (requested or 1.0) * 100
