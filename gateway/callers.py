"""Who is calling: the presented token, found in the routing snapshot, and what it may call.

A caller is known from the Authorization header alone, so nothing of a request from a
stranger is read: not its body (which the OpenAI form needs to name a model), nor anything
after. Digests are looked up in sets and dicts: they are not secret (keyed digests of
tokens), so lookup timing reveals nothing useful.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.responses import Response

from contracts.routing import ADAPTER_SEPARATOR, ModelMatch, RoutedKey, RoutedService, Snapshot
from contracts.tokens import bearer_token, token_digest
from contracts.usage import SERVICE_TOKEN_ID
from gateway import errors
from gateway.observe import metrics
from gateway.observe.metrics import Metrics

# The service label of refusals made before a service is known (a stranger's token).
NO_SERVICE = "-"


@dataclass(frozen=True)
class Caller:
    """A service's own token (no key, no key limits) or an API key."""

    key_id: str
    key: RoutedKey | None = None
    services: frozenset[str] = frozenset()  # a service token: the services it belongs to

    def may_call(self, service: str, now: float, adapter: str = "") -> bool:
        if self.key is not None:
            return self.key.allows(service, now, adapter)
        return service in self.services


def digest(authorization: str | None, secret_key: bytes) -> str | None:
    """The presented token's digest; the plaintext token goes no further than this."""
    token = bearer_token(authorization)
    return token_digest(secret_key, token) if token else None


def identify(snapshot: Snapshot, token: str | None, counters: Metrics) -> Caller | Response:
    """Who presents `token` (a digest), whatever they call: 401 for no token or an unknown
    or expired one."""
    if token is None:
        return errors.missing_token()
    key = snapshot.keys.get(token)
    if key is not None:
        if key.expires_at is not None and time.time() >= key.expires_at:
            counters.reject(NO_SERVICE, metrics.REASON_KEY_EXPIRED, 401)
            return errors.key_expired(key.expires_at)
        return Caller(key.id, key)
    services = snapshot.services_by_token.get(token)
    if services:
        return Caller(SERVICE_TOKEN_ID, services=services)
    counters.reject(NO_SERVICE, metrics.REASON_INVALID_TOKEN, 401)
    return errors.invalid_token()


def authorize(
    snapshot: Snapshot, service: RoutedService, token: str | None, counters: Metrics
) -> Caller | Response:
    """Who may call `service` (named in an EAS URL): 401, then 403 in that order (whether it
    has instances is asked next: gateway.routing.activation)."""
    if token is None:
        return errors.missing_token()
    caller = None
    if token in service.token_digests:
        caller = Caller(SERVICE_TOKEN_ID, services=frozenset({service.name}))
    if caller is None:
        checked = _check_key(snapshot.keys.get(token), service.name, counters)
        if isinstance(checked, Response):
            return checked
        caller = checked
    return caller


def _check_key(key: RoutedKey | None, service: str, counters: Metrics) -> Caller | Response:
    if key is None:
        counters.reject(service, metrics.REASON_INVALID_TOKEN, 401)
        return errors.invalid_token(service)
    now = time.time()
    if key.expires_at is not None and now >= key.expires_at:
        counters.reject(service, metrics.REASON_KEY_EXPIRED, 401)
        return errors.key_expired(key.expires_at)
    if not key.reaches(service):  # which adapter, once the body says (check_scope)
        counters.reject(service, metrics.REASON_KEY_SCOPE, 403)
        return errors.key_not_allowed(service)
    return Caller(key.id, key)


def check_scope(caller: Caller, service: str, adapter: str, counters: Metrics) -> Response | None:
    """For a call in EAS form, once its body says which adapter it calls ("" for the base
    model, or a call that names none): 403 when the key's scope does not include it."""
    if caller.may_call(service, time.time(), adapter):
        return None
    counters.reject(service, metrics.REASON_KEY_SCOPE, 403)
    return errors.key_not_allowed(service, adapter)


def callable_models(snapshot: Snapshot, caller: Caller, now: float) -> list[tuple[str, str]]:
    """(model, parent) of each `model` value the caller may use, in the order of their
    services' names: a base model's parent is "", an adapter's its base model's name."""
    found: dict[str, str] = {}
    for name in sorted(snapshot.services):
        service = snapshot.services[name]
        base = service.model_names[0]
        if caller.may_call(name, now):
            found.update(dict.fromkeys(service.model_names, ""))
        found.update({f"{base}{ADAPTER_SEPARATOR}{a}": base for a in service.adapters
                      if caller.may_call(name, now, a)})  # fmt: skip
    return list(found.items())  # de-duplicated, order kept


def model_service(
    snapshot: Snapshot, caller: Caller, model: str, counters: Metrics
) -> ModelMatch | Response:
    """The service (and adapter) a `model` names, if the caller may call it; else OpenAI's
    404, which does not tell a model that exists from one that does not."""
    match = snapshot.find_model(model)
    if match is None:
        return errors.unknown_model(model)
    if not caller.may_call(match.service.name, time.time(), match.adapter):
        counters.reject(match.service.name, metrics.REASON_KEY_SCOPE, 404)
        return errors.unknown_model(model)
    return match


def eas_adapter(service: RoutedService, model: object) -> str | None:
    """The adapter the `model` of an OpenAI call in EAS form picks: "" for the base model
    (no model, or one of the service's names), the adapter named alone or as
    "<name>:<adapter>"; None for a model the service does not serve. A service without
    adapters takes any model, as it always has."""
    if not service.adapters or not isinstance(model, str) or not model:
        return ""
    if service.answers_to(model):
        return ""
    base, separator, adapter = model.rpartition(ADAPTER_SEPARATOR)
    if separator and service.answers_to(base):
        model = adapter
    return model if model in service.adapters else None
