"""The usage taps alone: reading (and cutting) the usage event however the bytes arrive."""

from __future__ import annotations

import json

import pytest

from gateway.taps import JsonTap, SseTap

USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def event(data: object, newline: bytes = b"\n") -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return b"data: " + text.encode() + newline + newline


def stream(newline: bytes = b"\n", usage_on_every_chunk: bool = False) -> list[bytes]:
    """An OpenAI-style stream asked for its usage: two chunks, the usage event, [DONE]."""
    extra = {"usage": None} if usage_on_every_chunk else {}
    return [
        event({"choices": [{"text": "a"}], **extra}, newline),
        event({"choices": [{"text": "b"}], **extra}, newline),
        event({"choices": [], "usage": USAGE}, newline),
        event("[DONE]", newline),
    ]


def relay(tap: SseTap, chunks: list[bytes]) -> bytes:
    return b"".join(tap.feed(chunk) for chunk in chunks) + tap.finish()


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("size", [1, 7, 64, 10_000], ids=lambda n: f"reads-of-{n}")
def test_usage_event_is_read_and_cut_however_the_stream_is_split(newline: bytes, size: int) -> None:
    whole = b"".join(stream(newline))
    tap = SseTap(strip_usage_event=True)
    sent = relay(tap, [whole[i : i + size] for i in range(0, len(whole), size)])
    assert tap.counts == (5, 2)
    assert sent == whole.replace(stream(newline)[2], b"")


def test_complete_events_are_never_held_back_when_cutting() -> None:
    tap = SseTap(strip_usage_event=True)
    first, second, *_ = stream()
    assert tap.feed(first + second[:10]) == first  # the half event waits for its end
    assert tap.feed(second[10:]) == second


def test_client_that_asked_gets_every_byte_as_it_came() -> None:
    tap = SseTap(strip_usage_event=False)
    chunks = stream()
    whole = b"".join(chunks)
    pieces = [whole[i : i + 5] for i in range(0, len(whole), 5)]
    assert [tap.feed(piece) for piece in pieces] == pieces
    assert tap.finish() == b""
    assert tap.counts == (5, 2)


def test_null_usage_on_every_chunk_is_neither_parsed_nor_cut() -> None:
    tap = SseTap(strip_usage_event=True)
    chunks = stream(usage_on_every_chunk=True)
    assert relay(tap, chunks) == chunks[0] + chunks[1] + chunks[3]
    assert tap.counts == (5, 2)
    assert tap.events == 4


def test_stream_without_usage_counts_its_events() -> None:
    tap = SseTap(strip_usage_event=True)
    chunks = [event({"choices": [{"text": "a"}]}), event({"choices": [{"text": "b"}]})]
    assert relay(tap, chunks) == b"".join(chunks)
    assert (tap.counts, tap.events) == (None, 2)


def test_json_usage_is_read_from_the_relayed_copy() -> None:
    answer = json.dumps({"choices": [{"text": "hi"}], "usage": USAGE}).encode()
    tap = JsonTap()
    for i in range(0, len(answer), 3):
        tap.feed(answer[i : i + 3])
    assert tap.usage() == (5, 2)


def test_json_usage_of_a_huge_answer_is_read_from_its_tail() -> None:
    answer = json.dumps({"choices": [{"text": "x" * 3_000_000}], "usage": USAGE}).encode()
    tap = JsonTap()
    for i in range(0, len(answer), 65536):
        tap.feed(answer[i : i + 65536])
    assert tap.usage() == (5, 2)


def test_answers_without_usage_report_none() -> None:
    tap = JsonTap()
    tap.feed(b'{"choices": []}')
    assert tap.usage() is None
    broken = JsonTap()
    broken.feed(b"<html>")
    assert broken.usage() is None
