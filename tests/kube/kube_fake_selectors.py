"""Label selectors, field selectors and resource quantities, as the API server reads them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from kube_fake_store import Kind, bad_request

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SET = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        return present if self.op == "exists" else not present


def _split(text: str) -> list[str]:
    """Splits at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _requirement(part: str) -> Requirement:
    def checked(key: str, values: list[str]) -> tuple[str, frozenset[str]]:
        if not _KEY.match(key) or any(not _VALUE.match(v) or len(v) > 63 for v in values):
            raise bad_request(f"unable to parse requirement: found '{part}', expected: valid label")
        return key, frozenset(values)

    found = _SET.match(part)
    if found:
        key, values = checked(found[1], [v.strip() for v in found[3].split(",")])
        return Requirement(key, found[2], values)
    for op in ("!=", "==", "="):
        if op in part:
            key, value = (side.strip() for side in part.split(op, 1))
            key, values = checked(key, [value])
            return Requirement(key, "=" if op == "==" else op, values)
    if part.startswith("!"):
        return Requirement(checked(part[1:].strip(), [])[0], "!exists")
    return Requirement(checked(part, [])[0], "exists")


def label_selector(text: str | None) -> Callable[[dict], bool]:
    """A predicate over an object for `labelSelector` ("" or None selects everything)."""
    if not text or not text.strip():
        return lambda obj: True
    requirements = [_requirement(part) for part in _split(text)]

    def matches(obj: dict) -> bool:
        labels = obj["metadata"].get("labels") or {}
        return all(requirement.matches(labels) for requirement in requirements)

    return matches


def match_labels(selector: dict, labels: dict) -> bool:
    """A LabelSelector object (matchLabels, matchExpressions) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expression in selector.get("matchExpressions") or []:
        values = frozenset(expression.get("values") or ())
        if not Requirement(expression["key"], ops[expression["operator"]], values).matches(labels):
            return False
    return True


def _field(path: str) -> Callable[[dict], str]:
    def read(obj: dict) -> str:
        value: object = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return "" if value is None else str(value)

    return read


_COMMON_FIELDS = {"metadata.name": _field("metadata.name")}
_FIELDS = {
    "Event": {
        **{
            f"involvedObject.{name}": _field(f"involvedObject.{name}")
            for name in (
                "kind",
                "namespace",
                "name",
                "uid",
                "apiVersion",
                "resourceVersion",
                "fieldPath",
            )
        },
        "reason": _field("reason"),
        "reportingComponent": _field("reportingComponent"),
        "source": _field("source.component"),
        "type": _field("type"),
    },
    "Pod": {
        "spec.nodeName": _field("spec.nodeName"),
        "spec.restartPolicy": _field("spec.restartPolicy"),
        "spec.schedulerName": _field("spec.schedulerName"),
        "spec.serviceAccountName": _field("spec.serviceAccountName"),
        "status.phase": _field("status.phase"),
        "status.podIP": _field("status.podIP"),
        "status.nominatedNodeName": _field("status.nominatedNodeName"),
    },
}


def field_selector(kind: Kind, text: str | None) -> Callable[[dict], bool]:
    """A predicate for `fieldSelector`: the fields the API server indexes for the kind."""
    if not text or not text.strip():
        return lambda obj: True
    fields = {**_COMMON_FIELDS, **_FIELDS.get(kind.kind, {})}
    if kind.namespaced:
        fields["metadata.namespace"] = _field("metadata.namespace")
    tests: list[Callable[[dict], bool]] = []
    for part in _split(text):
        op = "!=" if "!=" in part else "==" if "==" in part else "="
        if op not in part:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        name, value = (side.strip() for side in part.split(op, 1))
        if name not in fields:
            raise bad_request(f"field label not supported: {name}")
        tests.append(_field_test(fields[name], value, op == "!="))
    return lambda obj: all(test(obj) for test in tests)


def _field_test(read: Callable[[dict], str], value: str, negate: bool) -> Callable[[dict], bool]:
    return lambda obj: (read(obj) == value) != negate


# Quantities ------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
QUANTITY_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def parse_quantity(value: object) -> tuple[Decimal, str]:
    """A quantity's value and its format ("binary", "decimal" or "exponent")."""
    text = str(value).strip()
    found = _QUANTITY.match(text)
    if not found or found[1].count(".") > 1:
        raise ValueError(QUANTITY_ERROR)
    number, suffix = Decimal(found[1]), found[2]
    if suffix in _BINARY:
        return number * 1024 ** _BINARY[suffix], "binary"
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix]), "decimal"
    if suffix[:1] in "eE" and re.fullmatch(r"[-+]?[0-9]+", suffix[1:]):
        return number.scaleb(int(suffix[1:])), "exponent"
    raise ValueError(QUANTITY_ERROR)


def canonical_quantity(value: object) -> str:
    """How the API server writes a quantity back: "1000m" -> "1", "1024Mi" -> "1Gi"."""
    number, form = parse_quantity(value)
    if form == "binary" and number == number.to_integral_value() and number >= 1024:
        for suffix, power in sorted(_BINARY.items(), key=lambda item: -item[1]):
            if number % (1024**power) == 0:
                return f"{int(number / 1024**power)}{suffix}"
    if number == 0:
        return "0"
    nano = (number * 10**9).to_integral_value(rounding="ROUND_CEILING")
    exponent = -9
    while nano % 1000 == 0 and exponent < 18:
        nano //= 1000
        exponent += 3
    if form == "exponent":
        return f"{nano}e{exponent}" if exponent else str(nano)
    suffix = {power: name for name, power in _DECIMAL.items()}[exponent]
    return f"{nano}{suffix}"
