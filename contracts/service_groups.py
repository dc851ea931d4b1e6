"""Service groups, as EAS has them: one endpoint over several services.

A service joins a group by naming it (`metadata.group`); the group exists while it has members.
The group's endpoint is `/api/predict/<group>/…` (EAS form) and `model: "<group>"` (OpenAI
form); each member keeps its own endpoint, and `/api/predict/<group>.<member>/…` reaches one
member through the group's name, as EAS's SDKs address a member.

Which member takes a group call is decided here, purely:
- only members released into the group (traffic state `grouping`) take its traffic; a member
  that joins later is `standalone` until released (EAS: "new members get no group traffic
  until enabled"), the first member of a new group is released as it creates it;
- traffic mode `auto`: each member's share follows its ready instances; `customized`: its
  weight (0-1000) among the members with a ready instance. A member with no ready instance
  takes none, unless none has one (then the weights decide, and the member answers as it
  would alone: held while it scales from zero, else 503);
- a call that carries a session header goes to the member its session hashes to, weighted
  (rendezvous hashing): the same member for as long as the weights stand, so prefix caches
  stay warm; others are spread by smooth weighted round robin, exact over any window.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from contracts.spec_fleet import _Strict

AUTO, CUSTOMIZED = "auto", "customized"
TRAFFIC_MODES = (AUTO, CUSTOMIZED)
STANDALONE, GROUPING = "standalone", "grouping"
TRAFFIC_STATES = (STANDALONE, GROUPING)
MAX_WEIGHT = 1000
DEFAULT_WEIGHT = 100
MEMBER_SEPARATOR = "."  # /api/predict/<group>.<member>: one member, through the group's name
GROUP_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"  # a service's name's pattern: one namespace
GROUP_METADATA = ("group",)  # shapes no instance (contracts.spec.spec_hash)


class Grouped(_Strict):
    """The metadata field that puts a service in a group."""

    group: str | None = Field(
        default=None, pattern=GROUP_PATTERN,
        description="The service group it joins (EAS's service groups): one endpoint, "
        "/api/predict/<group> and model <group>, over its members, split by ready instances "
        "or by weights. A new member takes no group traffic until released "
        "(POST /api/v1/services/<name>/release); the group's first member is released as it "
        "creates it. Changing it moves no instance.",
    )  # fmt: skip


class GroupTraffic(_Strict):
    """The networking field EAS writes a member's traffic state in (ReleaseService's)."""

    traffic_state: Literal["standalone", "grouping"] | None = Field(
        default=None,
        description="grouping: it takes its group's traffic (metadata.group); standalone: only "
        "its own endpoint's. Applied each time the spec is saved; unset, a new member of a "
        "group is standalone until released, the group's first member grouping.",
    )


@dataclass(frozen=True)
class GroupMember:
    service: str
    weight: int = DEFAULT_WEIGHT


@dataclass(frozen=True)
class RoutedGroup:
    """A group as the gateways route it: its released members only."""

    name: str
    mode: str = AUTO
    members: tuple[GroupMember, ...] = ()
    # The headers whose value keeps a caller's session on one member: the group's own, then
    # its members' (metadata.rpc.session_header).
    session_headers: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "members": [{"service": m.service, "weight": m.weight} for m in self.members],
            "session_headers": list(self.session_headers),
        }

    @classmethod
    def from_json(cls, name: str, entry: dict) -> RoutedGroup:
        mode = entry.get("mode", AUTO)
        if mode not in TRAFFIC_MODES:
            raise ValueError(f"traffic mode {mode!r}")
        members = tuple(
            GroupMember(str(m["service"]), _weight(m.get("weight", DEFAULT_WEIGHT)))
            for m in entry.get("members", [])
        )
        headers = entry.get("session_headers", [])
        if not isinstance(headers, list) or not all(isinstance(h, str) for h in headers):
            raise ValueError("session_headers is not a list of strings")
        return cls(name=name, mode=mode, members=members, session_headers=tuple(headers))


def _weight(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_WEIGHT:
        raise ValueError(f"weight {value!r}")
    return value


def effective_weights(
    mode: str, members: Sequence[GroupMember], ready: Mapping[str, int]
) -> dict[str, int]:
    """Each released member's weight in the split now: `auto`, its ready instances;
    `customized`, its weight if it has a ready instance. When no member has one, the weights
    alone (`auto`: one each), so the chosen member answers as it would alone."""
    if mode == AUTO:
        found = {m.service: ready.get(m.service, 0) for m in members}
        fallback = {m.service: 1 for m in members}
    else:
        found = {m.service: m.weight if ready.get(m.service, 0) else 0 for m in members}
        fallback = {m.service: m.weight for m in members}
    return found if any(found.values()) else fallback


def shares(weights: Mapping[str, int]) -> dict[str, float]:
    """Each member's share of the group's traffic (0-1) for those weights."""
    total = sum(weights.values())
    return {name: (w / total if total else 0.0) for name, w in weights.items()}


def sticky_choice(session: str, weights: Mapping[str, int]) -> str | None:
    """The member a session goes to: weighted rendezvous hashing, so a session stays where
    it is while the weights stand, and a change of weights moves only the sessions it must."""
    best, best_score = None, -math.inf
    for name in sorted(weights):
        weight = weights[name]
        if weight <= 0:
            continue
        digest = hashlib.blake2b(f"{name}\0{session}".encode(), digest_size=8).digest()
        unit = (int.from_bytes(digest, "big") + 0.5) / 2**64  # in (0, 1)
        score = -weight / math.log(unit)
        if score > best_score:
            best, best_score = name, score
    return best


@dataclass
class SmoothRoundRobin:
    """nginx's smooth weighted round robin: over any run of sum(weights) picks, each member
    is picked exactly its weight's times, interleaved. One per group and gateway process."""

    current: dict[str, int] = field(default_factory=dict)

    def pick(self, weights: Mapping[str, int]) -> str | None:
        live = {name: w for name, w in weights.items() if w > 0}
        if not live:
            return None
        self.current = {name: self.current.get(name, 0) for name in live}
        total = sum(live.values())
        for name, weight in live.items():
            self.current[name] += weight
        chosen = max(sorted(live), key=lambda name: self.current[name])
        self.current[chosen] -= total
        return chosen


def member_address(name: str) -> tuple[str, str] | None:
    """(group, member) of an EAS path's `<group>.<member>`; None for a plain name."""
    group, separator, member = name.partition(MEMBER_SEPARATOR)
    return (group, member) if separator and group and member else None
