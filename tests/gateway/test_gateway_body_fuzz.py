"""Generated bodies through a real gateway in front of the stand-in engine: never a 5xx.

Every refusal must be a 4xx in OpenAI's error shape, a refusal for a field must name it, and
a valid request must still be answered. Fixed seeds (derandomize) and bounded runs, so a
failure reproduces and the module takes seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from gateway_support import Engine, Gateway, Gateways, make_key, make_token, service, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.routing import RoutedKey
from gateway.relay.body import MAX_DEPTH

pytestmark = pytest.mark.timeout(120)

fuzz = settings(derandomize=True, database=None, deadline=None, max_examples=200)

# What the gateway reads; stream_options.include_usage stands for the field inside.
READ_FIELDS = (
    "model",
    "stream",
    "stream_options",
    "stream_options.include_usage",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "n",
    "best_of",
)
# The stand-in engine's test knobs (upstream_app) are set by the tests, never generated.
_NOT_GENERATED = set(READ_FIELDS) | {"prompt", "messages", "delay", "chunk_delay", "stop_after"}
PATHS = ("/v1/completions", "/v1/chat/completions", "/api/predict/fuzz-svc/v1/completions")


def _values(floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | st.integers() | floats | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=12,
    )


# What Python's json writes, NaN and Infinity included (no JSON: refused with a 400).
json_values = _values(st.floats())
# What RFC 8259 allows.
strict_json_values = _values(st.floats(allow_nan=False, allow_infinity=False))
extra_fields = st.dictionaries(
    st.text(max_size=12).filter(lambda name: name not in _NOT_GENERATED),
    strict_json_values,
    max_size=3,
)


@dataclass
class Target:
    url: str
    tokens: tuple[str, ...]  # the service's token, and an API key with a tokens-per-minute limit
    http: httpx.Client

    def post(self, path: str, content: bytes, caller: int = 0) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[caller]}"}
        return self.http.post(self.url + path, content=content, headers=headers)


@pytest.fixture(scope="module")
def target(redis_url: str, engines: list[Engine]) -> Iterator[Target]:
    token, digest = make_token()
    key_token, key_digest = make_key()
    svc = service("fuzz-svc", [engines[0].instance], [digest], models=("tiny",))
    keys = {key_digest: RoutedKey(id="fuzz-key", tpm=10**9)}
    gateways = Gateways(redis_url)
    gateway: Gateway = gateways.start(snapshot(1, svc, keys=keys))
    with httpx.Client(timeout=10, trust_env=False) as http:
        yield Target(gateway.url, (token, key_token), http)
    gateways.stop_all()


def _request(path: str, fields: dict[str, Any]) -> bytes:
    """A valid request with `fields` on top; the engine stops after two tokens whatever it is
    allowed, so that an accepted max_tokens of 2**31 - 1 answers quickly."""
    base: dict[str, Any] = {"model": "tiny", "stop_after": 2}
    base["messages" if "chat" in path else "prompt"] = "hello"
    return json.dumps({**base, **fields}).encode()


def _with_field(name: str, value: Any) -> dict[str, Any]:
    if name == "stream_options.include_usage":
        return {"stream": True, "stream_options": {"include_usage": value}}
    return {name: value}


def assert_openai_answer(response: httpx.Response, param: str | None = None) -> None:
    """Not a 5xx; a 4xx is OpenAI's error shape, naming `param` when it is a 400."""
    assert response.status_code < 500, response.text
    if response.status_code < 400:
        return
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and isinstance(error["message"], str)
    assert isinstance(error["type"], str) and isinstance(error["code"], str)
    if response.status_code == 400 and param is not None and error["param"] is not None:
        assert _names(error["param"], param), error


def _names(where: str, field: str) -> bool:
    """`where` is `field` or a place inside it (`model[0]`, `stream_options.x`)."""
    return where == field or where.startswith((f"{field}[", f"{field}."))


@fuzz
@given(
    path=st.sampled_from(PATHS),
    field=st.sampled_from(READ_FIELDS),
    value=json_values,
    caller=st.sampled_from((0, 1)),
)
def test_any_value_for_a_field_the_gateway_reads_is_answered_or_refused_naming_it(
    target: Target, path: str, field: str, value: Any, caller: int
) -> None:
    response = target.post(path, _request(path, _with_field(field, value)), caller)
    assert_openai_answer(response, field)
    if response.status_code == 400:
        assert _names(response.json()["error"]["param"], field)


@fuzz
@given(path=st.sampled_from(PATHS), data=json_values | st.dictionaries(
    st.sampled_from(READ_FIELDS[:3] + READ_FIELDS[4:] + ("prompt",)),
    st.just("tiny") | json_values,
))  # fmt: skip
def test_any_json_body_is_never_a_5xx(target: Target, path: str, data: Any) -> None:
    assert_openai_answer(target.post(path, json.dumps(data).encode()))


@fuzz
@given(
    path=st.sampled_from(PATHS[:2]),
    model=st.text(st.characters(exclude_categories=())) | st.sampled_from(("tiny", "fuzz-svc")),
)
def test_any_model_name_is_answered_or_refused_naming_it(
    target: Target, path: str, model: str
) -> None:
    """Unpaired surrogates included (the default alphabet has none); only the OpenAI form
    reads the model, so the stand-in engine, which echoes it, never sees them."""
    response = target.post(path, _request(path, {"model": model}))
    assert_openai_answer(response, "model")
    assert response.status_code in (200, 400, 404)


@fuzz
@given(path=st.sampled_from(PATHS), raw=st.binary(max_size=256))
def test_any_bytes_are_never_a_5xx(target: Target, path: str, raw: bytes) -> None:
    assert_openai_answer(target.post(path, raw))


@settings(fuzz, max_examples=60)
@given(
    path=st.sampled_from(PATHS),
    depth=st.integers(1, 3000),
    opening=st.sampled_from(('{"a": ', "[")),
)
def test_nesting_up_to_the_limit_is_forwarded_and_deeper_is_400(
    target: Target, path: str, depth: int, opening: str
) -> None:
    closing = "}" if opening.startswith("{") else "]"
    nested = opening * depth + "0" + closing * depth
    body = _request(path, {})[:-1] + f', "x": {nested}}}'.encode()
    response = target.post(path, body)
    assert_openai_answer(response)
    if depth + 1 > MAX_DEPTH:  # the body itself is a level
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "nesting_too_deep"
    else:
        assert response.status_code == 200


@settings(fuzz, max_examples=60)
@given(
    path=st.sampled_from(PATHS),
    field=st.sampled_from(("max_tokens", "max_completion_tokens", "temperature", "model")),
    digits=st.integers(1, 10_000),
    sign=st.sampled_from(("", "-")),
)
def test_huge_numbers_are_never_a_5xx(
    target: Target, path: str, field: str, digits: int, sign: str
) -> None:
    number = sign + "9" * digits
    body = _request(path, {})[:-1] + f', "{field}": {number}}}'.encode()
    assert_openai_answer(target.post(path, body), field)


@settings(fuzz, max_examples=30)
@given(path=st.sampled_from(PATHS), size=st.integers(0, 2_000_000), field=st.sampled_from(
    ("prompt", "model", "other")
))  # fmt: skip
def test_long_strings_are_never_a_5xx(target: Target, path: str, size: int, field: str) -> None:
    response = target.post(path, _request(path, {field: "w " * (size // 2)}))
    assert_openai_answer(response, field)


valid_fields = st.fixed_dictionaries(
    {},
    optional={
        "stream": st.none() | st.booleans(),
        "stream_options": st.none()
        | st.fixed_dictionaries({}, optional={"include_usage": st.none() | st.booleans()}),
        "max_tokens": st.none() | st.integers(0, 3),
        "max_completion_tokens": st.none() | st.integers(0, 3),
        "n": st.none() | st.integers(1, 2),
        "best_of": st.none() | st.integers(1, 2),
    },
)


@fuzz
@given(
    path=st.sampled_from(PATHS),
    fields=valid_fields,
    extra=extra_fields,
    caller=st.sampled_from((0, 1)),
)
def test_valid_request_is_answered(
    target: Target, path: str, fields: dict[str, Any], extra: dict[str, Any], caller: int
) -> None:
    response = target.post(path, _request(path, {**extra, **fields}), caller)
    assert response.status_code == 200, response.text
    if fields.get("stream"):
        assert response.text.endswith("data: [DONE]\n\n")
    else:
        assert response.json()["choices"]
