"""LoRA adapters through the gateway, on a real vLLM CPU engine serving the tiny model and two
tiny random adapters written by the project (PEFT format, B not zero), started with the flags
the engine adapter renders (contracts.engines.vllm.lora_args).

At temperature 0 the base model, `<model>:sql` and `<model>:chat` answer three different
texts, each the engine's own answer for that adapter; /v1/models lists the adapters with their
base as parent; an unknown adapter is OpenAI's 404 model_not_found, in either form.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from gateway_support import (
    SECRET_KEY,
    Gateway,
    Gateways,
    assert_error,
    make_token,
    metric,
    snapshot,
    wait_until,
)

from contracts.engine_keys import engine_key
from contracts.engines.vllm import lora_args
from contracts.routing import RoutedInstance, RoutedKey, RoutedService
from contracts.spec import parse_spec
from contracts.tokens import token_digest
from tests import vllm_support
from tests.vllm_support import VLLM_PYTHON, VLLM_VENV

INSTANCE = "vllm-lora-0"
SQL_KEY = "wak-scoped-to-the-sql-adapter-only-0123456789"
SERVICE = "assistant"  # served as "tiny"
PROMPT = "Hello world, the capital of"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM CPU build at {VLLM_VENV}"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM serving the tiny model as "tiny" with adapters sql and chat."""
    from controlplane.services.tiny_model import write_tiny_lora, write_tiny_model

    root = tmp_path_factory.mktemp("lora")
    model = write_tiny_model(root / "tiny")
    paths = {"sql": write_tiny_lora(root / "sql", seed=1),
             "chat": write_tiny_lora(root / "chat", seed=2)}  # fmt: skip
    spec = parse_spec({
        "name": SERVICE,
        "llm": {"engine": "vllm-cpu", "model": "tiny", "served_model_name": "tiny",
                "lora": {"adapters": [{"name": n, "model": str(p)} for n, p in paths.items()],
                         "max_loras": 2, "max_rank": 8}},
    })  # fmt: skip
    assert spec.llm is not None
    args = [
        "--max-model-len",
        "512",
        *lora_args(spec.llm.lora, {n: str(p) for n, p in paths.items()}),
    ]
    log = root / "vllm.log"
    with vllm_support.running(model, log, engine_key(SECRET_KEY, INSTANCE), args) as url:
        yield url


@pytest.fixture(scope="module")
def routed(engine: str, redis_url: str) -> Iterator[tuple[Gateway, str]]:
    """A gateway routing the service, with its adapters, to the engine, and an API key scoped
    to its adapter sql (SQL_KEY): (gateway, the service's token)."""
    token, digest = make_token()
    svc = RoutedService(
        name=SERVICE, served_model_names=("tiny",), token_digests=frozenset([digest]),
        instances=(RoutedInstance(INSTANCE, engine),), rate_limit=0, adapters=("sql", "chat"),
    )  # fmt: skip
    keys = {token_digest(SECRET_KEY, SQL_KEY): RoutedKey("k9", frozenset({f"{SERVICE}:sql"}))}
    gateways = Gateways(redis_url)
    try:
        yield gateways.start(snapshot(1, svc, keys=keys)), token
    finally:
        gateways.stop_all()


def complete(url: str, model: str | None, headers: dict[str, str]) -> httpx.Response:
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0}
    if model is not None:
        body["model"] = model
    return httpx.post(url, json=body, headers=headers, timeout=60, trust_env=False)


def text(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["text"]


def direct(engine: str, model: str) -> str:
    """What the engine itself answers for `model` (its own name of the base or an adapter)."""
    key = {"Authorization": f"Bearer {engine_key(SECRET_KEY, INSTANCE)}"}
    return text(complete(f"{engine}/v1/completions", model, key))


def test_base_and_each_adapter_answer_their_own_text_as_the_engine_does(routed, engine):
    gateway, token = routed
    url, auth = f"{gateway.url}/v1/completions", {"Authorization": f"Bearer {token}"}
    answers = {model: text(complete(url, model, auth))
               for model in ("tiny", "tiny:sql", "tiny:chat")}  # fmt: skip
    assert len(set(answers.values())) == 3, answers  # the adapters change the text
    assert answers["tiny"] == direct(engine, "tiny")
    assert answers["tiny:sql"] == direct(engine, "sql")
    assert answers["tiny:chat"] == direct(engine, "chat")
    # The service's own name picks the same adapter.
    assert text(complete(url, f"{SERVICE}:sql", auth)) == answers["tiny:sql"]
    # EAS form: the adapter by its name alone, or in full; no model is the base model.
    eas = f"{gateway.url}/api/predict/{SERVICE}/v1/completions"
    assert text(complete(eas, "sql", {"Authorization": token})) == answers["tiny:sql"]
    assert text(complete(eas, "tiny:chat", {"Authorization": token})) == answers["tiny:chat"]
    assert text(complete(eas, None, {"Authorization": token})) == answers["tiny"]


def test_an_unknown_adapter_is_model_not_found_in_either_form(routed):
    gateway, token = routed
    answer = complete(f"{gateway.url}/v1/completions", "tiny:nope",
                      {"Authorization": f"Bearer {token}"})  # fmt: skip
    assert_error(answer, 404, "invalid_request_error", "model_not_found", "model")
    answer = complete(f"{gateway.url}/api/predict/{SERVICE}/v1/completions", "nope",
                      {"Authorization": token})  # fmt: skip
    assert_error(answer, 404, "invalid_request_error", "model_not_found", "model")


def test_models_lists_each_adapter_with_its_base_as_parent(routed):
    gateway, token = routed
    auth = {"Authorization": f"Bearer {token}"}
    listed = httpx.get(f"{gateway.url}/v1/models", headers=auth, trust_env=False).json()
    assert [(m["id"], m["parent"]) for m in listed["data"]] == [
        ("tiny", None), ("tiny:sql", "tiny"), ("tiny:chat", "tiny"),
    ]  # fmt: skip
    one = httpx.get(f"{gateway.url}/v1/models/tiny:chat", headers=auth, trust_env=False)
    assert one.status_code == 200 and one.json()["parent"] == "tiny"
    missing = httpx.get(f"{gateway.url}/v1/models/tiny:nope", headers=auth, trust_env=False)
    assert_error(missing, 404, "invalid_request_error", "model_not_found", "model")


def test_a_key_scoped_to_one_adapter_calls_that_one_alone(routed):
    gateway, _ = routed
    url, auth = f"{gateway.url}/v1/completions", {"Authorization": f"Bearer {SQL_KEY}"}
    assert text(complete(url, "tiny:sql", auth))
    for model in ("tiny:chat", "tiny"):  # OpenAI's answer: no such model for this key
        assert_error(complete(url, model, auth), 404, "invalid_request_error",
                     "model_not_found", "model")  # fmt: skip
    listed = httpx.get(f"{gateway.url}/v1/models", headers=auth, trust_env=False).json()
    assert [m["id"] for m in listed["data"]] == ["tiny:sql"]
    eas = f"{gateway.url}/api/predict/{SERVICE}/v1/completions"
    assert text(complete(eas, "sql", {"Authorization": SQL_KEY}))
    refused = complete(eas, "chat", {"Authorization": SQL_KEY})
    assert_error(refused, 403, "invalid_request_error", "key_not_allowed")


def test_usage_and_metrics_count_each_adapter_on_its_own(routed):
    gateway, token = routed
    url, auth = f"{gateway.url}/v1/completions", {"Authorization": f"Bearer {token}"}
    before = gateway.usage()
    for model in ("tiny", "tiny:sql", "tiny:sql", "tiny:chat"):
        text(complete(url, model, auth))

    def requests(model: str) -> int:
        key = (model, "-", "requests")
        return gateway.usage().get(key, 0) - before.get(key, 0)

    assert wait_until(lambda: (requests(SERVICE), requests(f"{SERVICE}:sql"),
                               requests(f"{SERVICE}:chat")) == (1, 2, 1))  # fmt: skip
    figures = gateway.metrics()
    for adapter in ("", "sql", "chat"):
        assert metric(figures, "wharf_gateway_requests_total", service=SERVICE, status="200",
                      adapter=adapter) >= 1  # fmt: skip
        assert metric(figures, "wharf_gateway_tokens_total", service=SERVICE, kind="completion",
                      adapter=adapter) >= 12  # fmt: skip
