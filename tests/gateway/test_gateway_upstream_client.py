"""gateway.relay.upstream, the client the gateway calls engines with, against real sockets.

Each test runs an engine stand-in on asyncio's own server in the test's event loop: it
writes exactly the bytes under test (framings, silences, closes) and records what it got.
"""

from __future__ import annotations

import asyncio

import pytest
from gateway_support import free_port_refusing_connections
from raw_engine import (
    OK,
    Engine,
    answer_and_close,
    answer_and_hold,
    exchange,
    keep_answering,
    read_request,
    run,
)

from gateway.relay.upstream import (
    ConnectFailedError,
    Upstream,
    UpstreamBrokenError,
    UpstreamTimeoutError,
)

pytestmark = pytest.mark.timeout(30)


def test_sends_one_request_with_host_length_and_base_path_and_reads_the_answer() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(OK)

    async def test() -> None:
        async with Engine(handler) as engine:
            upstream = Upstream()
            answer = await upstream.request(
                engine.url + "/prefix/", "POST", "/v1/completions?x=1",
                [("content-type", "application/json"), ("x-a", "b")], b'{"a":1}', 5,
            )  # fmt: skip
            assert answer.status == 200
            assert answer.header(b"content-type") == b"application/json"
            assert await answer.read(1024) == b"{}"
            assert answer.at_eof
            answer.release()
            await upstream.close()
        head, body = seen[0]
        port = engine.url.rpartition(":")[2]
        assert head.split(b"\r\n")[:5] == [
            b"POST /prefix/v1/completions?x=1 HTTP/1.1",
            b"host: 127.0.0.1:" + port.encode(),
            b"content-type: application/json",
            b"x-a: b",
            b"content-length: 7",
        ]
        assert body == b'{"a":1}'

    run(test)


def test_reuses_a_kept_alive_connection() -> None:
    async def test() -> None:
        async with Engine(keep_answering()) as engine:
            upstream = Upstream()
            for _ in range(5):
                assert await exchange(upstream, engine) == b"{}"
            assert engine.connections == 1
            await upstream.close()

    run(test)


def test_hands_over_chunks_as_they_arrive() -> None:
    second = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await second.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await read_request(reader)
        writer.write(OK)

    async def test() -> None:
        async with Engine(handler) as engine:
            upstream = Upstream()
            answer = await upstream.request(engine.url, "POST", "/", [], b"{}", 5)
            assert await answer.read_chunk() == b"first"  # before the engine sends more
            assert not answer.at_eof
            second.set()
            assert await answer.read_chunk() == b"second"
            assert await answer.read_chunk() == b""
            answer.release()
            assert await exchange(upstream, engine) == b"{}"
            assert engine.connections == 1
            await upstream.close()

    run(test)


def test_answer_framed_by_close_ends_with_the_connection_and_is_not_pooled() -> None:
    until_close = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"

    async def test() -> None:
        async with Engine(answer_and_close(until_close)) as engine:
            upstream = Upstream()
            for _ in range(2):
                assert await exchange(upstream, engine) == b"all of it"
            assert engine.connections == 2
            await upstream.close()

    run(test)


def test_idle_connection_is_retired_after_the_keepalive() -> None:
    async def test() -> None:
        async with Engine(keep_answering()) as engine:
            upstream = Upstream(keepalive_s=0.2)
            answer = await upstream.request(engine.url, "POST", "/", [], b"{}", 5)
            await answer.read(1024)
            answer.release()
            await asyncio.wait_for(engine.ended.wait(), 2)
            await upstream.close()

    run(test)


def test_refused_connection_is_connect_failed() -> None:
    async def test() -> None:
        with pytest.raises(ConnectFailedError) as failed:
            await Upstream().request(free_port_refusing_connections(), "POST", "/", [], b"", 5)
        assert not failed.value.timed_out

    run(test)


def test_silence_before_the_head_times_out_and_drops_the_connection() -> None:
    async def test() -> None:
        async with Engine(answer_and_hold()) as engine:
            started = asyncio.get_running_loop().time()
            with pytest.raises(UpstreamTimeoutError):
                await Upstream().request(engine.url, "POST", "/", [], b"{}", 0.3)
            assert 0.25 < asyncio.get_running_loop().time() - started < 2
            await asyncio.wait_for(engine.ended.wait(), 2)

    run(test)


def test_silence_between_chunks_times_out_but_a_steady_stream_does_not() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(8):  # 0.8 s in all, longer than the timeout, never silent that long
            writer.write(b"1\r\nx\r\n")
            await asyncio.sleep(0.1)
        await asyncio.sleep(10)

    async def test() -> None:
        async with Engine(handler) as engine:
            answer = await Upstream().request(engine.url, "POST", "/", [], b"{}", 0.4)
            received = b""
            with pytest.raises(UpstreamTimeoutError):
                while True:
                    received += await answer.read_chunk()
            assert received == b"x" * 8
            answer.close()

    run(test)


def test_closing_an_answer_midway_closes_the_connection() -> None:
    first_chunk = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n"

    async def test() -> None:
        async with Engine(answer_and_hold(first_chunk)) as engine:
            upstream = Upstream()
            answer = await upstream.request(engine.url, "POST", "/", [], b"{}", 5)
            assert await answer.read_chunk() == b"x"
            answer.close()
            await asyncio.wait_for(engine.ended.wait(), 2)
            await upstream.close()

    run(test)


def test_cancelled_call_closes_the_connection() -> None:
    async def test() -> None:
        async with Engine(answer_and_hold()) as engine:
            call = asyncio.create_task(Upstream().request(engine.url, "POST", "/", [], b"{}", 5))
            await asyncio.sleep(0.2)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.wait_for(engine.ended.wait(), 2)

    run(test)


@pytest.mark.parametrize(
    "answer",
    [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab", b"NOT HTTP\r\n\r\n", b""],
    ids=["cut-short", "malformed", "closed-before-head"],
)
def test_broken_answers_are_upstream_broken(answer: bytes) -> None:
    async def test() -> None:
        async with Engine(answer_and_close(answer)) as engine:
            with pytest.raises(UpstreamBrokenError) as broken:
                got = await Upstream().request(engine.url, "POST", "/", [], b"{}", 5)
                await got.read(1024)
            assert "by the gateway" not in str(broken.value)  # the engine's fault, said so

    run(test)


def test_stops_reading_while_the_gateway_falls_behind() -> None:
    size = 32 * 1024 * 1024
    drained = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        await writer.drain()
        drained.set()

    async def test() -> None:
        async with Engine(handler) as engine:
            answer = await Upstream().request(engine.url, "POST", "/", [], b"{}", 5)
            await asyncio.sleep(0.5)
            # Not read yet: the client paused, so the engine's writes back up.
            assert not drained.is_set()
            assert len(await answer.read(size)) == size
            assert drained.is_set()
            answer.release()

    run(test)


def test_connection_with_bytes_after_the_answer_is_not_reused() -> None:
    async def test() -> None:
        async with Engine(keep_answering(OK + b"HTTP/1.1 200 OK\r\n")) as engine:
            upstream = Upstream()
            for _ in range(2):
                assert await exchange(upstream, engine) == b"{}"
            assert engine.connections == 2
            await upstream.close()

    run(test)


def test_interim_answers_are_skipped() -> None:
    async def test() -> None:
        interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
        async with Engine(keep_answering(interim + OK)) as engine:
            upstream = Upstream()
            for _ in range(2):
                answer = await upstream.request(engine.url, "POST", "/", [], b"{}", 5)
                assert answer.status == 200 and answer.header(b"link") is None
                assert await answer.read(1024) == b"{}"
                answer.release()
            assert engine.connections == 1
            await upstream.close()

    run(test)


def test_a_head_answer_ends_with_its_head_and_its_connection_is_reused() -> None:
    async def test() -> None:
        # A HEAD's answer names the length of the body a GET would get, and sends none.
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n"
        requests: list[bytes] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                request_head, _ = await read_request(reader)
                requests.append(request_head.split(b" ")[0])
                writer.write(head if request_head.startswith(b"HEAD") else OK)

        async with Engine(handler) as engine:
            upstream = Upstream()
            answer = await asyncio.wait_for(
                upstream.request(engine.url, "HEAD", "/", [], b"", 5), 2
            )
            assert answer.status == 200 and answer.header(b"content-length") == b"42"
            assert await asyncio.wait_for(answer.read(1024), 2) == b""
            answer.release()
            assert await exchange(upstream, engine) == b"{}"
            assert requests == [b"HEAD", b"POST"] and engine.connections == 1
            await upstream.close()

    run(test)


@pytest.mark.parametrize(
    "status_line", [b"HTTP/1.1 204 No Content\r\n", b"HTTP/1.1 304 Not Modified\r\n"]
)
def test_204_and_304_answers_end_with_their_head(status_line: bytes) -> None:
    async def test() -> None:
        # A 304 may name the length of the representation it stands for; no body follows.
        answer_bytes = status_line + b'etag: "v1"\r\ncontent-length: 42\r\n\r\n'
        async with Engine(keep_answering(answer_bytes)) as engine:
            upstream = Upstream()
            answer = await asyncio.wait_for(upstream.request(engine.url, "GET", "/", [], b"", 5), 2)
            assert await asyncio.wait_for(answer.read(1024), 2) == b""
            answer.release()
            await upstream.close()

    run(test)
