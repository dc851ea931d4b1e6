"""The pure parts of OpenAI's Batch API (contracts.batch) and of online-first sharing
(contracts.sharing), table-driven."""

from __future__ import annotations

import json
import math

import pytest

from contracts import batch
from contracts.sharing import GAP_MARGIN, SETTLE_S, queued_slots

CHAT = "/v1/chat/completions"


def _text(**fields: object) -> str:
    line = {"custom_id": "r1", "method": "POST", "url": CHAT, "body": {"model": "m"}}
    line.update(fields)
    return json.dumps({k: v for k, v in line.items() if v is not None})


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("{not json", "invalid_json_line"),
        ("[1, 2]", "invalid_json_line"),
        (_text(custom_id=None), "missing_required_parameter"),
        (_text(custom_id=""), "missing_required_parameter"),
        (_text(method=None), "missing_required_parameter"),
        (_text(body=None), "missing_required_parameter"),
        (_text(body={}), "missing_required_parameter"),
        (_text(url=None), "missing_required_parameter"),
        (_text(method="GET"), "invalid_method"),
        (_text(url="/v1/embeddings"), "mismatched_endpoint"),
        (_text(body={"messages": []}), "missing_model"),
        (_text(body={"model": 3}), "missing_model"),
    ],
)
def test_a_line_that_may_not_run_says_why(text, code):
    found = batch.read_line(7, text, CHAT)
    assert isinstance(found, batch.LineError) and found.code == code and found.number == 7
    assert "line 7" in found.message


def test_a_line_that_may_run():
    found = batch.read_line(1, _text(method="post"), CHAT)
    assert found == batch.Line("r1", CHAT, "m", {"model": "m"})


@pytest.mark.parametrize(
    ("status", "to", "allowed"),
    [
        ("validating", "in_progress", True),
        ("in_progress", "finalizing", True),
        ("finalizing", "completed", True),
        ("in_progress", "cancelling", True),
        ("cancelling", "cancelled", True),
        ("in_progress", "expired", True),
        ("completed", "cancelling", False),
        ("cancelled", "in_progress", False),
        ("in_progress", "completed", False),
        ("expired", "completed", False),
    ],
)
def test_status_moves(status, to, allowed):
    assert batch.may_move(status, to) is allowed


@pytest.mark.parametrize(
    ("body", "parsed"),
    [(b'{"x": 1}', {"x": 1}), (b"plain text", "plain text"), (b"", "")],
)
def test_output_lines_are_openais_shape(body, parsed):
    line = batch.output_line("c1", 200, "req-1", body)
    assert line["id"].startswith("batch_req_") and line["custom_id"] == "c1"
    assert line["response"] == {"status_code": 200, "request_id": "req-1", "body": parsed}
    assert line["error"] is None


def test_error_lines_are_openais_shape():
    line = batch.error_line("", "model_not_found", "no model x")
    assert line["custom_id"] is None and line["response"] is None
    assert line["error"] == {"code": "model_not_found", "message": "no model x"}


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}', (3, 4)),
        (b'{"usage": {"prompt_tokens": 3}}', (3, 0)),
        (b'{"choices": []}', (0, 0)),
        (b"not json", (0, 0)),
        (b"[1]", (0, 0)),
    ],
)
def test_usage_of_an_answer(body, tokens):
    assert batch.usage_of(body) == tokens


@pytest.mark.parametrize(
    ("window", "online", "queued", "slots"),
    [
        (4, {"a": 0, "b": 0}, {}, {"a": 4, "b": 4}),
        (4, {"a": 0, "b": 0}, {"a": 3}, {"a": 1, "b": 4}),
        (4, {"a": 0}, {"a": 6}, {"a": 0}),  # the window shrank under it
        (4, {"a": 1, "b": 0}, {}, {"a": 0, "b": 0}),  # an online call anywhere: none starts
        (4, {"a": 0, "b": 2}, {"a": 1}, {"a": 0, "b": 0}),
        (2, {}, {}, {}),
    ],
)
def test_queued_work_takes_only_what_online_calls_leave(window, online, queued, slots):
    assert queued_slots(window, online, queued) == slots


@pytest.mark.parametrize(
    ("quiet_for", "queued", "slots"),
    [
        (0.3, {}, {"a": 1, "b": 1}),  # online traffic is on: one item per instance
        (0.3, {"a": 1}, {"a": 0, "b": 1}),
        (0.3, {"a": 3}, {"a": 0, "b": 1}),  # more in work from before: none more
        (SETTLE_S - 0.01, {}, {"a": 1, "b": 1}),
        (SETTLE_S, {}, {"a": 4, "b": 4}),  # quiet long enough: the whole window
        (math.inf, {"a": 1}, {"a": 3, "b": 4}),  # no online call lately
    ],
)  # fmt: skip
def test_while_online_traffic_is_on_queued_work_keeps_to_one_item_per_instance(
    quiet_for, queued, slots
):
    assert queued_slots(4, {"a": 0, "b": 0}, queued, quiet_for) == slots


@pytest.mark.parametrize(
    ("next_call_in", "item_s", "queued", "slots"),
    [
        ({"a": 0.4, "b": 0.4}, 0.1, {}, {"a": 1, "b": 1}),  # an item fits before the next call
        ({"a": 0.4, "b": 0.1}, 0.1, {}, {"a": 1, "b": 0}),  # b's next call is due too soon
        ({"a": 0.13, "b": 0.12}, 0.1, {}, {"a": 1, "b": 0}),  # the margin: 1.25 items' time
        ({"a": 0.0, "b": 0.4}, 0.0, {}, {"a": 1, "b": 1}),  # no item timed yet: one goes
        ({"a": 0.4}, 0.1, {"a": 1}, {"a": 0, "b": 1}),  # b's pace unknown: one goes
        ({"a": 9.0, "b": 9.0}, 0.1, {"a": 1}, {"a": 0, "b": 1}),  # still one per instance
    ],
)  # fmt: skip
def test_while_online_traffic_is_on_an_item_starts_only_in_a_gap_it_fits(
    next_call_in, item_s, queued, slots
):
    assert GAP_MARGIN == 1.25  # the table's third row is drawn at it
    assert queued_slots(4, {"a": 0, "b": 0}, queued, 0.3, next_call_in, item_s) == slots


def test_once_online_traffic_is_off_the_gaps_no_longer_matter():
    assert queued_slots(4, {"a": 0}, {}, SETTLE_S, {"a": 0.0}, 5.0) == {"a": 4}
    assert queued_slots(0, {"a": 0}, {}, 0.3, {"a": 9.0}, 0.1) == {"a": 0}  # no window
