"""A service's labels, as EAS's service JSON gives them (`"labels": {"team": "search"}`): kept
with the service, shown with it, and what `GET /api/v1/services?label=team=search` (and
`wharf services list --label`) selects by, as EAS's ListServices does. Pure."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from contracts.spec_fleet import _Strict

MAX_LABELS = 64
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,126}$")


class ServiceLabels(_Strict):
    labels: dict[str, str] | None = Field(
        default=None, max_length=MAX_LABELS,
        description="Labels to select services by (GET /api/v1/services?label=key=value).",
    )  # fmt: skip

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, text in (value or {}).items():
            if not LABEL_KEY.fullmatch(key):
                raise ValueError(f"{key!r}: a label key is up to 127 letters, digits, '_', "
                                 "'.', '/' or '-', starting with a letter or digit")  # fmt: skip
            if len(text) > 256 or any(ord(c) < 32 for c in text):
                raise ValueError(f"the value of {key!r}: up to 256 printable characters")
        return value


def parse_selector(text: str) -> tuple[str, str]:
    """`key=value` (or EAS's `key:value`) as (key, value); ValueError naming the form."""
    for separator in ("=", ":"):
        key, found, value = text.partition(separator)
        if found and LABEL_KEY.fullmatch(key):
            return key, value
    raise ValueError(f"{text!r}: a label selector is key=value")


def matches(labels: object, selectors: list[tuple[str, str]]) -> bool:
    """Whether a spec's `labels` has every (key, value) of `selectors`."""
    found = labels if isinstance(labels, dict) else {}
    return all(found.get(key) == value for key, value in selectors)
