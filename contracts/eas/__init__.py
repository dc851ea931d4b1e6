"""EAS as EAS users write it: their service JSON, in any of the spellings EAS takes, made into
Wharf's one canonical spec (contracts.spec) before it is validated and stored.

`normalise(data)` is the one way in: processor services refused with what to deploy instead
(contracts.eas.processors), spellings (contracts.eas.spellings), then stringly numbers and
booleans (contracts.eas.coerce). Cloud-only fields are the schema's (contracts.spec_cloud).
The API, the console and the CLI send what the user wrote; what is stored is the canonical
form.
"""

from __future__ import annotations

import functools
from typing import Any

from contracts.eas.coerce import coerce
from contracts.eas.processors import processor_errors
from contracts.eas.spellings import canonical


@functools.cache
def spec_schema() -> dict:
    """The spec's JSON schema, which EAS's spellings and types are coerced by (built once)."""
    from contracts.spec import ServiceSpec

    return ServiceSpec.model_json_schema()


def normalise(data: Any) -> Any:
    """`data` in Wharf's canonical spelling and types; SpecError naming a setting given twice
    with different values, or an EAS processor's fields. Anything that is not an object is
    returned as is, for the schema to refuse."""
    from contracts.spec import SpecError

    if errors := processor_errors(data):
        raise SpecError(errors)
    return coerce(canonical(data), spec_schema())
