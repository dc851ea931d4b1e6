"""gateway.relay.reuse's rules, alone: when a request that met a closing kept-alive connection is
sent again (Go's net/http, urllib3 and aiohttp's rules, plus the engine's idle-timer race)."""

from __future__ import annotations

import pytest

from gateway.relay.reuse import UNREAD_WINDOW_S, may_resend, replayable


@pytest.mark.parametrize(
    ("method", "headers", "expected"),
    [
        ("GET", [], True),
        ("HEAD", [], True),
        ("PUT", [], True),
        ("DELETE", [], True),
        ("OPTIONS", [], True),
        ("POST", [], False),
        ("PATCH", [], False),
        ("POST", [("Idempotency-Key", "k")], True),
        ("POST", [("X-Idempotency-Key", "k")], True),
        ("POST", [("x-request-id", "k")], False),
    ],
)
def test_replayable_methods_are_rfc_9110s_idempotent_ones_or_carry_a_key(
    method: str, headers: list[tuple[str, str]], expected: bool
) -> None:
    assert replayable(method, headers) is expected


@pytest.mark.parametrize(
    ("replayable_", "heard", "after", "expected"),
    [
        (True, False, 5.0, True),  # an idempotent request: whenever the close came
        (False, False, 0.001, True),  # the engine's idle timer, as the request arrived
        (False, False, UNREAD_WINDOW_S, True),
        (False, False, UNREAD_WINDOW_S + 0.01, False),  # it may have run the request
        (True, True, 0.001, False),  # part of an answer came: never again
        (False, True, 0.001, False),
    ],
)
def test_a_request_is_sent_again_only_when_it_is_safe(
    replayable_: bool, heard: bool, after: float, expected: bool
) -> None:
    assert may_resend(replayable_, heard, sent_at=100.0, closed_at=100.0 + after) is expected


def test_a_connection_still_open_is_no_reason_to_send_again() -> None:
    assert not may_resend(True, False, sent_at=100.0, closed_at=0.0)
