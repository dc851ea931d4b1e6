"""Service groups at the gateway: a call to a group's name (`/api/predict/<group>/…`, or
`model: "<group>"`) goes to one of its released members, which contracts.service_groups
picks; it is then that member's call in every respect (limits, routing within the member,
usage, metrics).

Who may call a group: a token of one of its released members (EAS calls a group with a
member's token), or an API key whose scope names the group (or a key for every service of
its workspace). That caller is let through to the member the split picked, for this call.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from starlette.responses import Response

from contracts.routing import RoutedService, Snapshot
from contracts.service_groups import (
    RoutedGroup,
    SmoothRoundRobin,
    effective_weights,
    sticky_choice,
)
from contracts.usage import SERVICE_TOKEN_ID
from gateway import errors
from gateway.callers import Caller
from gateway.observe import metrics
from gateway.observe.metrics import Metrics


class GroupSplit:
    """One gateway process's picks: a smooth round robin per group, exact over any window
    of calls, so the gateways together hold the weights too."""

    def __init__(self) -> None:
        self._turns: dict[str, SmoothRoundRobin] = {}

    def member(
        self, snapshot: Snapshot, group: RoutedGroup, headers: Mapping[str, str]
    ) -> RoutedService | Response:
        """The member this call goes to: its session's, else the next turn; 503 when the
        group has no released member."""
        members = [m for m in group.members if m.service in snapshot.services]
        ready = {m.service: len(snapshot.services[m.service].instances) for m in members}
        weights = effective_weights(group.mode, members, ready)
        session = next((headers[h] for h in group.session_headers if headers.get(h)), None)
        if session is not None:
            chosen = sticky_choice(session, weights)
        else:
            chosen = self._turns.setdefault(group.name, SmoothRoundRobin()).pick(weights)
        if chosen is None:
            return errors.no_group_member(group.name)
        return snapshot.services[chosen]

    def loaded(self, snapshot: Snapshot) -> None:
        """Forget the turns of groups gone from the snapshot."""
        for name in set(self._turns) - set(snapshot.groups):
            del self._turns[name]


def members(group: RoutedGroup) -> frozenset[str]:
    return frozenset(m.service for m in group.members)


def authorize(
    snapshot: Snapshot, group: RoutedGroup, token: str | None, counters: Metrics
) -> Caller | Response:
    """Who may call the group: 401 for no token or an unknown one, 403 for a key whose scope
    does not reach it."""
    if token is None:
        return errors.missing_token()
    if snapshot.services_by_token.get(token, frozenset()) & members(group):
        return Caller(SERVICE_TOKEN_ID, services=members(group))
    key = snapshot.keys.get(token)
    if key is None:
        counters.reject(group.name, metrics.REASON_INVALID_TOKEN, 401)
        return errors.invalid_token(group.name)
    if key.expires_at is not None and time.time() >= key.expires_at:
        counters.reject(group.name, metrics.REASON_KEY_EXPIRED, 401)
        return errors.key_expired(key.expires_at)
    if not key.reaches(group.name):
        counters.reject(group.name, metrics.REASON_KEY_SCOPE, 403)
        return errors.key_not_allowed(group.name)
    return Caller(key.id, key)


def may_call(caller: Caller, group: RoutedGroup, now: float) -> bool:
    """Whether a caller known from its token alone (OpenAI form) may call the group."""
    if caller.key is not None:
        return caller.key.allows(group.name, now)
    return bool(caller.services & members(group))


def through(caller: Caller, member: str) -> Caller:
    """`caller`, who may call the group, let through to the member it was split to."""
    key = caller.key
    if key is None:
        return replace(caller, services=caller.services | {member})
    if key.services is None or member in key.services:
        return caller
    return replace(caller, key=replace(key, services=key.services | {member}))
