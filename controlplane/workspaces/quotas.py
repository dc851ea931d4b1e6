"""Workspace quotas: services, instances, cards by kind, and queued items (Async items and
batch requests not yet answered). Pure: what a spec takes, and what a
change would take past a quota, for table tests; the API's checks read the rows
(quota_checks.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from contracts.spec import ServiceSpec
from contracts.spec_facts import card_need, replicas

CARD_KINDS = ("gpu", "npu")
MAX_QUOTA = 2**31 - 1


@dataclass(frozen=True)
class Quotas:
    services: int | None = None  # None: no quota
    instances: int | None = None
    cards: dict[str, int] = field(default_factory=dict)  # kind -> quota; a kind absent: none
    queued_items: int | None = None  # Async items and batch requests waiting or in work

    def bound_services(self) -> bool:
        """Whether a quota bounds what services hold (services, instances or cards)."""
        return self.services is not None or self.instances is not None or bool(self.cards)

    def within(self, ceilings: Quotas) -> Quotas:
        """These quotas capped by `ceilings` (staff's): the lower of each pair, None: none."""
        kinds = set(self.cards) | set(ceilings.cards)
        cards = {k: _lower(self.cards.get(k), ceilings.cards.get(k)) for k in sorted(kinds)}
        return Quotas(_lower(self.services, ceilings.services),
                      _lower(self.instances, ceilings.instances),
                      {k: v for k, v in cards.items() if v is not None},
                      _lower(self.queued_items, ceilings.queued_items))  # fmt: skip

    def above(self, ceilings: Quotas) -> dict[str, list[str]]:
        """Each of these quotas set higher than its ceiling, by name (`quotas.cards.gpu`)."""
        pairs = [("services", self.services, ceilings.services),
                 ("instances", self.instances, ceilings.instances),
                 ("queued_items", self.queued_items, ceilings.queued_items)]  # fmt: skip
        pairs += [(f"cards.{k}", v, ceilings.cards.get(k)) for k, v in sorted(self.cards.items())]
        return {
            f"quotas.{name}": [f"at most {ceiling}: the ceiling staff set for this workspace"]
            for name, quota, ceiling in pairs
            if quota is not None and ceiling is not None and quota > ceiling
        }


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True)
class Footprint:
    """What services take of a workspace: services, and instances and cards while running."""

    services: int = 0
    instances: int = 0
    cards: Counter = field(default_factory=Counter)

    def __add__(self, other: Footprint) -> Footprint:
        return Footprint(self.services + other.services, self.instances + other.instances,
                         self.cards + other.cards)  # fmt: skip


def footprint(spec: ServiceSpec | None, running: bool) -> Footprint:
    """One service's: it counts as a service always; its instances and their cards only
    while it is meant to run (a stopped service holds none)."""
    if spec is None or not running:
        return Footprint(services=1)
    cards: Counter = Counter()
    wanted = replicas(spec)
    for role, count in wanted.items():
        kind, per_instance = card_need(spec, role)
        if per_instance:
            cards[kind] += per_instance * count
    return Footprint(1, sum(wanted.values()), cards)


def excess(
    quotas: Quotas, others: Footprint, before: Footprint, after: Footprint, workspace: str
) -> dict[str, list[str]]:
    """Each quota a service's change from `before` to `after` (nothing before: a new one)
    would pass, given what the workspace's other services take (`others`), by name
    (`quotas.services`, `quotas.instances`, `quotas.cards.gpu`), with the figures. Only what
    grows is checked: a change that takes less is never refused, even past a lowered quota."""
    problems: dict[str, list[str]] = {}

    def check(name: str, quota: int | None, used: int, was: int, asked: int, unit: str) -> None:
        if quota is not None and asked > was and used + asked > quota:
            problems[f"quotas.{name}"] = [
                f"this needs {asked} {unit}; the other services of workspace {workspace!r} "
                f"hold {used} of its quota of {quota}"
            ]

    check("services", quotas.services, others.services, before.services, after.services,
          "service(s)")  # fmt: skip
    check("instances", quotas.instances, others.instances, before.instances, after.instances,
          "instance(s)")  # fmt: skip
    for kind in sorted(after.cards):
        check(f"cards.{kind}", quotas.cards.get(kind), others.cards[kind], before.cards[kind],
              after.cards[kind], f"{kind.upper()}(s)")  # fmt: skip
    return problems


def queued_limit(quotas: Quotas, platform_default: int | None) -> int | None:
    """The queued items a workspace may have: its quota (its ceiling applied), else the
    platform's default (WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE); None: no bound."""
    return quotas.queued_items if quotas.queued_items is not None else platform_default


def queued_excess(
    limit: int | None, queued: int, adding: int, workspace: str
) -> dict[str, list[str]]:
    """`quotas.queued_items` with the figures when putting `adding` more items beside the
    `queued` ones the workspace has would pass `limit` (None: no bound); {} when within."""
    if limit is None or adding <= 0 or queued + adding <= limit:
        return {}
    return {
        "quotas.queued_items": [
            f"this puts {adding} item(s); workspace {workspace!r} has {queued} queued (Async "
            f"items and batch requests not yet answered) of its quota of {limit}"
        ]
    }
