"""What a request offers the cache-aware policies (gateway.routing.request_keys): the prompt's text,
read from the fields the engine's prefix cache is keyed by, and the session header."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.routing.policies import LEAST_OUTSTANDING, PREFIX_CACHE, SESSION
from gateway.routing.request_keys import PROMPT_CHARS, prompt_text, routing_key


@pytest.mark.parametrize(
    ("data", "text"),
    [
        pytest.param({"model": "m", "prompt": "Hello"}, "m\nHello", id="completion"),
        pytest.param({"prompt": "Hello"}, "Hello", id="no-model-eas-form"),
        pytest.param({"model": "m", "prompt": ["a", "b"]}, "m\na\nb\n", id="batch"),
        pytest.param({"prompt": [1, 2, 3]}, "1 2 3 ", id="token-ids"),
        pytest.param({"prompt": [[1, 2], [3]]}, "1 2\n3\n", id="batched-token-ids"),
        pytest.param({"input": "embed me"}, "embed me", id="embeddings-input"),
        pytest.param(
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                ],
            },  # fmt: skip
            "m\nsystem\nBe brief.\nuser\nHi\n",
            id="chat",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {"type": "image_url", "image_url": {"url": "http://x/cat.png"}},
                        ],
                    }
                ]
            },  # fmt: skip
            'user\nWhat is this?{"image_url": {"url": "http://x/cat.png"}, "type": "image_url"}\n',
            id="chat-parts",
        ),
        pytest.param({"model": "m"}, None, id="no-prompt"),
        pytest.param({"model": "m", "prompt": ""}, None, id="empty-prompt"),
        pytest.param({"prompt": 42}, None, id="prompt-of-another-type"),
        pytest.param({"messages": ["not a message"]}, None, id="odd-messages"),
    ],
)
def test_prompt_text(data: dict[str, Any], text: str | None) -> None:
    assert prompt_text(data) == text


def test_prompt_text_stops_at_the_blocks_hashed() -> None:
    long = {"messages": [{"role": "user", "content": "x" * 1000}] * 500}
    text = prompt_text(long)
    assert text is not None and len(text) == PROMPT_CHARS


def test_routing_key_reads_only_what_the_policies_use() -> None:
    data = {"prompt": "Hello"}
    headers = {"x-session-id": "s-1", "x-user": "u-2"}
    assert routing_key({LEAST_OUTSTANDING}, data, headers, "x-session-id") is None
    key = routing_key({PREFIX_CACHE}, data, headers, "x-session-id")
    assert key is not None and (key.prompt, key.session) == ("Hello", None)
    key = routing_key({SESSION}, data, headers, "x-user")
    assert key is not None and (key.prompt, key.session) == (None, "u-2")
    # A prefill leg by prefix, decode by session: both.
    key = routing_key({PREFIX_CACHE, SESSION}, data, headers, "x-session-id")
    assert key is not None and (key.prompt, key.session) == ("Hello", "s-1")


def test_routing_key_without_prompt_or_session_is_none() -> None:
    assert routing_key({SESSION}, {"prompt": "x"}, {}, "x-session-id") is None
    assert routing_key({PREFIX_CACHE}, None, {}, "x-session-id") is None  # not an OpenAI body
