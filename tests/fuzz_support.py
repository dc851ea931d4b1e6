"""What the fuzz suites share: a fixed-seed, bounded hypothesis profile, and arbitrary JSON."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)


def fuzz(max_examples: int) -> settings:
    """The same cases on every run (CI included), no example database, no deadline: these
    tests call real servers, whose timing is not what they check."""
    return settings(
        derandomize=True, database=None, max_examples=max_examples, deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )  # fmt: skip


def json_values(scalars=SCALARS, *, max_size: int = 4, max_leaves: int = 8):
    """Any JSON value built from `scalars`: lists and objects nested around them."""
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=max_size)
            | st.dictionaries(st.text(max_size=8), inner, max_size=max_size)
        ),
        max_leaves=max_leaves,
    )
