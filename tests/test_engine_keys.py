"""Engine keys: derived per instance (contracts.engine_keys), handed to vLLM through its
environment, hidden from the preview, and not to be replaced by a key of the user's own."""

import json
import re

import pytest

from contracts.engine_keys import engine_key
from contracts.engines import Placement, render, validate
from contracts.spec import parse_spec
from contracts.tokens import (
    API_KEY_PREFIX,
    API_TOKEN_PREFIX,
    SERVICE_TOKEN_PREFIX,
    new_token,
    token_digest,
)

KEY = "wek-" + "0" * 64
VLLM_ENGINES = ("vllm", "vllm-cpu", "vllm-ascend")


# The derivation


def test_an_engine_key_is_stable_and_pinned():
    # Workers and gateways of different releases must agree on it; checked against
    # `printf 'engine:qwen-1a2b3c' | openssl dgst -sha256 -hmac wharf-secret`.
    expected = "wek-c55c7d38a9e0db99ed1eaf1c4688d6dbd8902dc404c7c43188a392923bface02"
    assert engine_key(b"wharf-secret", "qwen-1a2b3c") == expected
    assert engine_key(b"wharf-secret", "qwen-1a2b3c") == expected


@pytest.mark.parametrize(
    "one, other",
    [
        ((b"wharf-secret", "qwen-1a2b3c"), (b"wharf-secret", "qwen-4d5e6f")),  # instance
        ((b"wharf-secret", "qwen-1a2b3c"), (b"other-secret", "qwen-1a2b3c")),  # deployment
        ((b"wharf-secret", "qwen-p-1a2b3c"), (b"wharf-secret", "qwen-d-1a2b3c")),  # role
        ((b"wharf-secret", "a"), (b"wharf-secret", "a ")),
    ],
)
def test_engine_keys_differ_per_instance_and_per_secret(one, other):
    assert engine_key(*one) != engine_key(*other)


@pytest.mark.parametrize("name", ["qwen-1a2b3c", "x", "svc-p-000000", "ünïcode-1"])
def test_an_engine_key_is_never_in_a_wharf_token_format(name):
    key = engine_key(b"wharf-secret", name)
    assert re.fullmatch(r"wek-[0-9a-f]{64}", key)
    prefixes = (SERVICE_TOKEN_PREFIX, API_TOKEN_PREFIX, API_KEY_PREFIX)
    assert not key.startswith(prefixes)
    # Nor the digest a token is stored as, under the same secret.
    assert key.removeprefix("wek-") != token_digest(b"wharf-secret", name)


def test_an_engine_key_is_not_the_digest_of_any_token():
    token = new_token(SERVICE_TOKEN_PREFIX)
    assert engine_key(b"s", token).removeprefix("wek-") != token_digest(b"s", token)


# vLLM gets it in its environment


def spec(engine: str, pd: bool = False, env: dict | None = None, **llm):
    kind = "npu" if engine == "vllm-ascend" else "gpu"
    cards = {} if engine == "vllm-cpu" else {kind: 1}
    data: dict = {"name": "svc", "llm": {"engine": engine, "model": "m", **llm},
                  "metadata": cards}  # fmt: skip
    if pd:
        data["llm"]["pd"] = {"prefill": cards, "decode": cards, "kv_connector": "NixlConnector"}
    if env:
        data["containers"] = [{"env": [{"name": k, "value": v} for k, v in env.items()]}]
    return parse_spec(data)


PLACEMENTS = {
    "plain": Placement(engine_key=KEY, devices=(0,)),
    "prefill": Placement(engine_key=KEY, devices=(0,), role="prefill", service="svc"),
    "decode": Placement(engine_key=KEY, devices=(0,), role="decode", service="svc"),
    "process": Placement(engine_key=KEY, in_container=False, host="127.0.0.1", port=41000),
}


@pytest.mark.parametrize("engine", VLLM_ENGINES)
@pytest.mark.parametrize("where", PLACEMENTS)
def test_vllm_gets_the_instance_key_in_its_environment_not_its_command_line(engine, where):
    plan = render(spec(engine, pd=where in ("prefill", "decode")), PLACEMENTS[where])
    assert plan.env["VLLM_API_KEY"] == KEY
    assert not [arg for arg in plan.args if KEY in arg or arg.startswith("--api-key")]


@pytest.mark.parametrize("engine", VLLM_ENGINES)
def test_the_preview_names_the_key_without_showing_it(engine):
    plan = render(spec(engine), PLACEMENTS["plain"])
    shown = plan.preview()
    assert KEY not in json.dumps(shown)
    assert "VLLM_API_KEY" not in shown["env"] and shown["secret_env"] == ["VLLM_API_KEY"]
    assert shown["env"]["HF_HUB_OFFLINE"] == "1"  # the rest is shown as before


def test_the_user_env_cannot_replace_the_key():
    plan = render(spec("vllm", env={"VLLM_API_KEY": "mine"}), PLACEMENTS["plain"])
    assert plan.env["VLLM_API_KEY"] == KEY


@pytest.mark.parametrize("engine", VLLM_ENGINES)
@pytest.mark.parametrize(
    "given, field",
    [
        ({"extra_args": ["--api-key", "mine"]}, "llm.extra_args"),
        ({"extra_args": ["--api-key=mine"]}, "llm.extra_args"),
        ({"options": {"--api-key": "mine"}}, "llm.options"),
        ({"env": {"VLLM_API_KEY": "mine"}}, "containers[0].env"),
    ],
)
def test_a_key_of_the_users_own_is_refused_naming_the_field(engine, given, field):
    errors = validate(spec(engine, **given))
    assert "set by Wharf" in errors[field][0]


def test_engines_without_a_key_get_none():
    assert "VLLM_API_KEY" not in render(spec("vllm"), Placement(devices=(0,))).env
    tgi = parse_spec(
        {"name": "svc", "llm": {"engine": "tgi", "model": "m"}, "metadata": {"gpu": 1}}
    )
    assert "VLLM_API_KEY" not in render(tgi, PLACEMENTS["plain"]).env
