"""The usage taps alone: reading (and cutting) the usage event however the bytes arrive."""

from __future__ import annotations

import json
import time

import pytest

from gateway.relay.taps import EventTooLargeError, JsonTap, SseTap

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


MIB = 1 << 20


@pytest.mark.parametrize("strip", [True, False], ids=["cutting", "copying"])
@pytest.mark.parametrize("read", [64 * 1024, 100 * MIB], ids=["64KiB-reads", "one-read"])
def test_an_endless_event_is_held_up_to_the_limit_then_refused(strip: bool, read: int) -> None:
    tap = SseTap(strip_usage_event=strip, event_limit=MIB)
    endless = b"data: " + b"x" * (100 * MIB)
    fed = 0
    with pytest.raises(EventTooLargeError) as refused:
        for at in range(0, len(endless), read):
            tap.feed(endless[at : at + read])
            fed += read
            assert tap.held <= MIB
    assert refused.value.limit == MIB
    assert fed <= MIB  # refused as soon as the event passed the limit, not at its end
    assert tap.held == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("strip", [True, False], ids=["cutting", "copying"])
def test_an_unfinished_event_costs_time_linear_in_its_size(strip: bool) -> None:
    # 64 MiB in 4 KiB reads: re-copying or re-searching what is held on every read would
    # cost about 16,000 x 32 MiB (minutes); once per byte it is milliseconds.
    tap = SseTap(strip_usage_event=strip, event_limit=128 * MIB)
    piece = b"x" * 4096
    started = time.process_time()
    tap.feed(b"data: ")
    for _ in range(64 * MIB // len(piece)):
        tap.feed(piece)
    tap.feed(b"\n\n" + event({"choices": [], "usage": USAGE}))
    assert time.process_time() - started < 3
    assert (tap.held, tap.counts, tap.events) == (0, (5, 2), 2)


@pytest.mark.parametrize("size", [1, 2, 3, 5], ids=lambda n: f"reads-of-{n}")
def test_a_boundary_split_across_reads_ends_the_event(size: int) -> None:
    tap = SseTap(strip_usage_event=True, event_limit=64)
    whole = b"".join(event({"choices": [{"text": "a" * 20}]}, b"\r\n") for _ in range(20))
    sent = b"".join(tap.feed(whole[i : i + size]) for i in range(0, len(whole), size))
    assert sent == whole and tap.held == 0 and tap.events == 20


def test_a_huge_json_answer_is_kept_up_to_its_copy_limit() -> None:
    tap = JsonTap(copy_limit=MIB)
    tap.feed(b'{"choices": [{"text": "')
    for _ in range(100):
        tap.feed(b"x" * MIB)
        assert tap.held <= MIB
    tap.feed(b'"}], "usage": ' + json.dumps(USAGE).encode() + b"}")
    assert tap.usage() == (5, 2)


RESPONSES_USAGE = {"input_tokens": 9, "output_tokens": 4, "total_tokens": 13}


def test_a_responses_api_answer_is_metered_from_its_input_and_output_tokens() -> None:
    answer = json.dumps({"object": "response", "output": [], "usage": RESPONSES_USAGE}).encode()
    whole = JsonTap()
    whole.feed(answer)
    assert whole.usage() == (9, 4)
    tail = JsonTap(copy_limit=16)  # past the copy: read from the tail
    for i in range(0, len(answer), 10):
        tail.feed(answer[i : i + 10])
    assert tail.usage() == (9, 4)


def test_a_responses_api_stream_is_metered_from_its_completed_event() -> None:
    created = {"type": "response.created", "response": {"usage": None}}
    completed = {"type": "response.completed", "response": {"usage": RESPONSES_USAGE}}
    chunks = [event(created), event({"type": "response.output_text.delta"}), event(completed)]
    tap = SseTap(strip_usage_event=False)
    assert relay(tap, chunks) == b"".join(chunks)
    assert tap.counts == (9, 4)
