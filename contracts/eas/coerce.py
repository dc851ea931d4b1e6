"""Numbers and booleans EAS users write as strings (`"instance": "2"`, `"generate_token":
"true"`, Terraform's `jsonencode` of string variables), as the schema types them. Pure.

Only where the schema wants a number or a boolean and takes no string there: a string that
is one, exactly, becomes it; any other value is left for the strict schema to refuse by name.
"""

from __future__ import annotations

import re
from typing import Any

INTEGER = re.compile(r"-?[0-9]{1,18}")
NUMBER = re.compile(r"-?[0-9]{1,18}(\.[0-9]{1,18})?([eE][-+]?[0-9]{1,3})?")
BOOLEANS = {"true": True, "false": False}


def coerce(data: Any, schema: dict) -> Any:
    """`data` (JSON) with its stringly numbers and booleans typed as `schema` (a pydantic JSON
    schema with its $defs) wants them; a copy where anything changed."""
    return _coerce(data, schema, schema.get("$defs", {}))


def _coerce(value: Any, node: dict, defs: dict) -> Any:
    alternatives = _alternatives(node, defs)
    types = {alt.get("type") for alt in alternatives}
    if isinstance(value, str) and "string" not in types:
        return _typed(value, types)
    if isinstance(value, dict):
        for alt in alternatives:
            if alt.get("type") == "object" or "properties" in alt:
                return _object(value, alt, defs)
    if isinstance(value, list):
        for alt in alternatives:
            if alt.get("type") == "array" and isinstance(alt.get("items"), dict):
                return [_coerce(item, alt["items"], defs) for item in value]
    return value


def _object(value: dict, node: dict, defs: dict) -> dict:
    properties = node.get("properties", {})
    extra = node.get("additionalProperties")
    out = {}
    for key, item in value.items():
        if key in properties:
            out[key] = _coerce(item, properties[key], defs)
        elif isinstance(extra, dict):
            out[key] = _coerce(item, extra, defs)
        else:
            out[key] = item
    return out


def _typed(value: str, types: set) -> Any:
    text = value.strip()
    if "boolean" in types and text.lower() in BOOLEANS:
        return BOOLEANS[text.lower()]
    if "integer" in types and INTEGER.fullmatch(text):
        return int(text)
    if "number" in types and NUMBER.fullmatch(text):
        return float(text)
    return value


def _alternatives(node: dict, defs: dict) -> list[dict]:
    """The schemas a value may match at `node`: its anyOf/oneOf members, refs resolved."""
    node = _resolve(node, defs)
    members = node.get("anyOf") or node.get("oneOf")
    if not members:
        return [node]
    return [alt for member in members for alt in _alternatives(member, defs)]


def _resolve(node: dict, defs: dict) -> dict:
    seen = 0
    while "$ref" in node and seen < 32:
        node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        seen += 1
    if "allOf" in node and len(node["allOf"]) == 1:
        return _resolve(node["allOf"][0], defs)
    return node
