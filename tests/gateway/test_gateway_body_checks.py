"""What the gateway makes of a generation body, without servers: gateway.relay.body's pure parts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.engine_routes import POOLING, RESPONSES
from gateway.config import MAX_BODY_BYTES, ConfigError, load_settings
from gateway.relay import body
from gateway.relay.body import MAX_CHOICES, MAX_DEPTH, MAX_MODEL_LENGTH, MAX_TOKENS, Invalid


def _nested(levels: int) -> bytes:
    """A body whose arrays and objects nest `levels` deep, the body itself included."""
    inner = levels - 1
    return b'{"model": "m", "x": ' + b"[" * inner + b"]" * inner + b"}"


def _body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "prompt": "hi", **fields}).encode()


# Deeper than the json module itself can parse (it raises RecursionError).
_ARRAYS_TOO_DEEP = b'{"model": "m", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
_OBJECTS_TOO_DEEP = b'{"model": "m", "x": ' + b'{"a": ' * 5_000 + b"1" + b"}" * 5_000 + b"}"
_USAGE = "stream_options.include_usage"


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        (b"", "invalid_json", None),
        (b"not json", "invalid_json", None),
        (b'{"model": "m",', "invalid_json", None),
        (b'["model", "m"]', "invalid_json", None),
        (b'"model"', "invalid_json", None),
        (b"null", "invalid_json", None),
        (b'{"model": "\xff"}', "invalid_json", None),
        ('{"model": "m"}'.encode("utf-16"), "invalid_json", None),
        (b'{"model": "m", "max_tokens": 1' + b"0" * 5000 + b"}", "invalid_json", None),
        (_nested(MAX_DEPTH + 1), "nesting_too_deep", None),
        (_ARRAYS_TOO_DEEP, "nesting_too_deep", None),
        (_OBJECTS_TOO_DEEP, "nesting_too_deep", None),
        (_body(model=None), "missing_model", "model"),
        (_body(model=""), "missing_model", "model"),
        (json.dumps({"prompt": "hi"}).encode(), "missing_model", "model"),
        (_body(model=42), "invalid_type", "model"),
        (_body(model=["m"]), "invalid_type", "model"),
        (_body(model="m" * (MAX_MODEL_LENGTH + 1)), "string_above_max_length", "model"),
        (b'{"model": "m\\ud800"}', "invalid_value", "model"),
        (_body(stream="yes"), "invalid_type", "stream"),
        (_body(stream=1), "invalid_type", "stream"),
        (_body(stream=0), "invalid_type", "stream"),
        (_body(stream={}), "invalid_type", "stream"),
        (_body(stream_options=True), "invalid_type", "stream_options"),
        (_body(stream_options=[]), "invalid_type", "stream_options"),
        (_body(stream_options={"include_usage": "yes"}), "invalid_type", _USAGE),
        (_body(stream_options={"include_usage": 1}), "invalid_type", _USAGE),
        (_body(max_tokens="16"), "invalid_type", "max_tokens"),
        (_body(max_tokens=16.0), "invalid_type", "max_tokens"),
        (_body(max_tokens=True), "invalid_type", "max_tokens"),
        (_body(max_tokens=[16]), "invalid_type", "max_tokens"),
        (_body(max_tokens=-1), "integer_below_min_value", "max_tokens"),
        (_body(max_tokens=10**30), "integer_above_max_value", "max_tokens"),
        (_body(max_tokens=MAX_TOKENS + 1), "integer_above_max_value", "max_tokens"),
        (_body(max_output_tokens="9"), "invalid_type", "max_output_tokens"),
        (_body(n=0), "integer_below_min_value", "n"),
        (_body(n=2.0), "invalid_type", "n"),
        (_body(n=MAX_CHOICES + 1), "integer_above_max_value", "n"),
        (_body(best_of=True), "invalid_type", "best_of"),
        (_body(best_of=-3), "integer_below_min_value", "best_of"),
        (_body(max_completion_tokens="x"), "invalid_type", "max_completion_tokens"),
        (_body(max_completion_tokens=False), "invalid_type", "max_completion_tokens"),
        (_body(max_completion_tokens=-5), "integer_below_min_value", "max_completion_tokens"),
        (_body(max_completion_tokens=2**64), "integer_above_max_value", "max_completion_tokens"),
    ],
)  # fmt: skip
def test_refuses_body_naming_the_field(raw: bytes, code: str, param: str | None) -> None:
    refused = body.parse(raw, model_required=True)
    assert isinstance(refused, Invalid)
    assert (refused.status, refused.code, refused.param) == (400, code, param)
    assert refused.message


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"stream": True},
        {"stream": False, "stream_options": None},
        {"stream": None, "max_tokens": None, "max_completion_tokens": None},
        {"stream": True, "stream_options": {"include_usage": False, "other": "x"}},
        {"stream_options": {"include_usage": None}},
        {"max_tokens": 0, "max_completion_tokens": MAX_TOKENS},
        {"n": 1, "best_of": MAX_CHOICES, "max_output_tokens": 0},
        {"model": "m" * MAX_MODEL_LENGTH},
        {"model": "modèle-🚀", "prompt": "\ud800"},  # only the model must be encodable
        # Fields the gateway does not read go to the engine as they are, whatever they hold.
        {"top_p": "many", "temperature": "hot", "messages": 42, "prompt": {"a": [1e308, None]}},
        {"x": json.loads(b"[" * (MAX_DEPTH - 2) + b"]" * (MAX_DEPTH - 2))},
        {"prompt": "[" * 1000 + "{" * 1000},  # brackets in a string are not nesting
    ],
)
def test_accepts_body_and_returns_it_parsed(fields: dict[str, Any]) -> None:
    raw = _body(**fields)
    assert body.parse(raw, model_required=True) == json.loads(raw)


def test_depth_limit_counts_the_body_itself_as_level_one() -> None:
    assert isinstance(body.parse(_nested(MAX_DEPTH), model_required=True), dict)
    assert isinstance(body.parse(_nested(MAX_DEPTH + 1), model_required=True), Invalid)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("model_required", [True, False])
def test_refuses_what_python_reads_but_json_has_not(constant: str, model_required: bool) -> None:
    # In any field, read or not: an engine echoing it back fails with a 500.
    raw = b'{"model": "tiny", "prompt": "NaN", "x": {"y": [1, %s]}}' % constant.encode()
    refused = body.parse(raw, model_required=model_required)
    assert isinstance(refused, Invalid) and refused.code == "invalid_json"
    assert refused.param == "x.y[1]" and "NaN and Infinity are not JSON" in refused.message
    spelled = b'{"model": "tiny", "prompt": "Infinity and NaN"}'  # in a string: fine
    assert body.parse(spelled, model_required=model_required) == json.loads(spelled)


@pytest.mark.parametrize("model", [None, 42, "", ["a"]])
def test_eas_form_does_not_read_the_model(model: Any) -> None:
    raw = json.dumps({"model": model, "prompt": "hi"}).encode()
    assert body.parse(raw, model_required=False) == json.loads(raw)


def test_eas_form_still_checks_the_fields_it_reads() -> None:
    refused = body.parse(b'{"stream": "yes"}', model_required=False)
    assert isinstance(refused, Invalid)
    assert refused.param == "stream"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, body.DEFAULT_MAX_TOKENS),
        ({}, body.DEFAULT_MAX_TOKENS),
        ({"max_tokens": None}, body.DEFAULT_MAX_TOKENS),
        ({"max_tokens": 0}, body.DEFAULT_MAX_TOKENS),
        ({"max_tokens": 7}, 7),
        ({"max_completion_tokens": 9}, 9),
        ({"max_tokens": 7, "max_completion_tokens": 9}, 7),
        ({"max_tokens": 7, "n": 3}, 21),
        ({"max_tokens": 7, "n": 2, "best_of": 5}, 35),  # best_of sequences are generated
        ({"n": 4}, 4 * body.DEFAULT_MAX_TOKENS),
        ({"max_completion_tokens": 9, "n": None, "best_of": 2}, 18),
    ],
)
def test_charges_max_tokens_times_the_sequences_else_the_default(
    data: dict[str, Any] | None, expected: int
) -> None:
    assert body.completion_budget(data) == expected


@pytest.mark.parametrize(
    ("kind", "data", "expected"),
    [
        (RESPONSES, {"max_output_tokens": 40, "max_tokens": 7, "n": 3}, 40),
        (RESPONSES, {}, body.DEFAULT_MAX_TOKENS),
        (POOLING, {"n": 3}, body.DEFAULT_MAX_TOKENS),
    ],
)
def test_other_inference_routes_charge_their_own_field(
    kind: str, data: dict[str, Any], expected: int
) -> None:
    assert body.completion_budget(data, kind) == expected


@pytest.mark.parametrize(
    ("fields", "asked", "options"),
    [
        ({}, False, None),
        ({"stream": False}, False, None),
        ({"stream": True}, True, {"include_usage": True}),
        ({"stream": True, "stream_options": None}, True, {"include_usage": True}),
        ({"stream": True, "stream_options": {}}, True, {"include_usage": True}),
        (
            {"stream": True, "stream_options": {"include_usage": False, "x": 1}},
            True,
            {"include_usage": True, "x": 1},
        ),
        ({"stream": True, "stream_options": {"include_usage": True}}, False, None),
    ],
)  # fmt: skip
def test_asks_a_stream_for_its_usage_unless_the_client_did(
    fields: dict[str, Any], asked: bool, options: dict[str, Any] | None
) -> None:
    """`options`: the stream_options the engine gets, when the gateway changed them."""
    raw = _body(**fields)
    sent, stripped = body.ask_for_usage(json.loads(raw), raw)
    assert stripped is asked
    if options is None:
        assert sent == raw
    else:
        assert json.loads(sent) == {**json.loads(raw), "stream_options": options}


@pytest.mark.parametrize(
    ("value", "expected"), [(None, MAX_BODY_BYTES), ("", MAX_BODY_BYTES), ("1024", 1024)]
)
def test_max_body_bytes_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: int
) -> None:
    monkeypatch.setenv("WHARF_SECRET_KEY", "secret")
    if value is None:
        monkeypatch.delenv("WHARF_GATEWAY_MAX_BODY_BYTES", raising=False)
    else:
        monkeypatch.setenv("WHARF_GATEWAY_MAX_BODY_BYTES", value)
    assert load_settings().max_body_bytes == expected


def test_refuses_a_max_body_bytes_below_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_SECRET_KEY", "secret")
    monkeypatch.setenv("WHARF_GATEWAY_MAX_BODY_BYTES", "0")
    with pytest.raises(ConfigError, match="WHARF_GATEWAY_MAX_BODY_BYTES"):
        load_settings()
