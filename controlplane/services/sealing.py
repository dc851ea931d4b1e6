"""The secrets in stored specs (object-storage `access_key_secret`s, `dockerAuth`, the hub
token `llm.hub_token`) are encrypted at rest: sealed before a spec reaches the database,
unsealed only where a spec is used (Service.parsed_spec, the API's checks). Fernet, with a
key of Wharf's own (WHARF_SECRETS_KEY; earlier keys in WHARF_SECRETS_KEY_PREVIOUS still open
what they sealed, and `manage.py rotate_secrets` seals everything again with the current one).

A sealed value is a string, `wharf-sealed:v1:<Fernet token>`, in the secret's own place, so a
sealed spec has the shape of the spec and the API's redaction and keep-on-update work on it
unchanged."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from controlplane.services.secrets import secret_places

PREFIX = "wharf-sealed:v1:"


class UnsealError(ValueError):
    """A sealed value no configured key opens (a key lost or not configured here)."""


def _keys() -> MultiFernet:
    keys = [settings.WHARF_SECRETS_KEY, *settings.WHARF_SECRETS_KEY_PREVIOUS]
    return MultiFernet([Fernet(key.strip().encode()) for key in keys])


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def _each_secret(spec: Any, change: Callable[[str], str]) -> Any:
    """A copy of the spec with `change` applied to every secret that is a string."""
    out = copy.deepcopy(spec)
    for container, names in secret_places(out):
        for name in names:
            if isinstance(container.get(name), str) and container[name]:
                container[name] = change(container[name])
    return out


def seal_value(value: str, keys: MultiFernet | None = None) -> str:
    """One secret sealed (a sealed one as it is)."""
    if is_sealed(value):
        return value
    return PREFIX + (keys or _keys()).encrypt(value.encode()).decode()


def unseal_value(value: str, keys: MultiFernet | None = None) -> str:
    """One secret opened (a plain one as it is); UnsealError if no key opens it."""
    if not is_sealed(value):
        return value
    try:
        return (keys or _keys()).decrypt(value.removeprefix(PREFIX).encode()).decode()
    except InvalidToken:
        raise UnsealError(
            "a secret in this spec was sealed with a key this Wharf does not have; "
            "set WHARF_SECRETS_KEY (and WHARF_SECRETS_KEY_PREVIOUS) as when it was stored"
        ) from None


def seal(spec: Any) -> Any:
    """The spec with each plain secret sealed (sealed ones are kept as they are)."""
    keys = _keys()
    return _each_secret(spec, lambda value: seal_value(value, keys))


def unseal(spec: Any) -> Any:
    """The spec with each sealed secret opened; UnsealError if a key is missing."""
    keys = _keys()
    return _each_secret(spec, lambda value: unseal_value(value, keys))


def reseal(spec: Any) -> Any:
    """The spec with each sealed secret sealed again with the current key."""
    return seal(unseal(spec))
