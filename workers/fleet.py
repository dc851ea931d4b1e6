"""What the scheduler and the node agents share: their settings, handed in as a parameter, the
fleet-wide placement lock, and the wake-up a scheduler sends a node's agent."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from workers.locks import client, leased

WAKE_KEY = "wharf:agent:wake:{node}"


@dataclass(frozen=True)
class FleetSettings:
    node_grace: float = 30.0  # a node silent this long is not_ready
    node_evict: float = 60.0  # and this much longer: its instances are placed elsewhere
    health_timeout: float = 900.0  # a new instance not ready by then has failed to start
    backoff_base: float = 10.0  # a crashed engine waits this long before its first restart,
    backoff_max: float = 300.0  # doubling up to this
    backoff_reset: float = 600.0  # up this long, its next crash starts over from the base
    job_retries: int = 3  # a job's instance whose command fails is run again this often at most
    agent_interval: float = 2.0  # seconds between a node agent's passes
    # A request that picked an instance just before its gateway loaded the snapshot without it
    # is counted only once it connects: such requests get this long before a drained instance
    # stops.
    drain_settle: float = 2.0
    pd_ports: tuple[int, int] = (30000, 32767)  # where prefill/decode instances' ports come from

    @classmethod
    def from_django(cls) -> FleetSettings:
        return cls(
            node_grace=settings.WHARF_NODE_GRACE,
            node_evict=settings.WHARF_NODE_EVICT,
            health_timeout=settings.WHARF_HEALTH_TIMEOUT,
            backoff_base=settings.WHARF_BACKOFF_BASE,
            backoff_max=settings.WHARF_BACKOFF_MAX,
            job_retries=settings.WHARF_JOB_RETRIES,
            pd_ports=settings.WHARF_PD_PORTS,
        )

    def backoff(self, restarts: int) -> float:
        """Seconds before restart number `restarts` (1, 2, ...): 10, 20, 40, ... 300."""
        return min(self.backoff_base * 2 ** max(restarts - 1, 0), self.backoff_max)


@contextmanager
def placement_lock(timeout: float = 60) -> Iterator[None]:
    """Held while cards are given out anywhere in the fleet, so none is given twice."""
    with leased("wharf:placement", wait=timeout) as held:
        if not held:
            raise TimeoutError(f"the placement lock stayed busy for {timeout} s")
        yield


def wake(nodes: set[str]) -> None:
    """Tell these nodes' agents to look now instead of at their next pass."""
    if not nodes:
        return
    with client().pipeline() as pipe:
        for node in nodes:
            key = WAKE_KEY.format(node=node)
            pipe.rpush(key, "1")
            pipe.ltrim(key, -1, -1)
            pipe.expire(key, 60)
        pipe.execute()


def wait_for_wake(node: str, timeout: float) -> None:
    """Until woken or `timeout` seconds have passed."""
    client().blpop([WAKE_KEY.format(node=node)], timeout=max(timeout, 0.01))
