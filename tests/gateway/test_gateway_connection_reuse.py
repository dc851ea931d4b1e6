"""gateway.relay.upstream reusing kept-alive engine connections, against real sockets: a pooled
connection the engine closed is passed over, a request that meets a close unanswered is sent
again only where that is safe (gateway/relay/reuse.py), and the keep-alive is configurable."""

from __future__ import annotations

import asyncio

import pytest
from raw_engine import (
    OK,
    Engine,
    answer_and_close,
    close_a_while_after_the_second_request,
    close_on_the_second_request,
    exchange,
    keep_answering,
    run,
)

from gateway.config import ConfigError, load_settings
from gateway.relay.upstream import Upstream, UpstreamBrokenError

pytestmark = pytest.mark.timeout(30)


def test_pooled_connection_the_engine_closes_is_not_reused() -> None:
    async def test() -> None:
        # As an engine's idle timeout does: it closes the kept-alive connection.
        async with Engine(answer_and_close(OK)) as engine:
            upstream = Upstream()
            assert await exchange(upstream, engine) == b"{}"
            await asyncio.sleep(0.1)  # the close arrives while the connection sits idle
            assert await exchange(upstream, engine) == b"{}"
            assert engine.connections == 2
            await upstream.close()

    run(test)


def test_kept_alive_connection_closing_as_it_is_reused_sends_the_request_once_more() -> None:
    async def test() -> None:
        async with Engine(close_on_the_second_request()) as engine:
            upstream = Upstream()
            assert await exchange(upstream, engine) == b"{}"
            assert await exchange(upstream, engine) == b"{}"  # the retry: a new connection
            assert engine.connections == 2
            await upstream.close()

    run(test)


def test_a_new_connection_closed_without_an_answer_is_not_retried() -> None:
    async def test() -> None:
        # The engine may have run the request before it went away.
        async with Engine(answer_and_close(b"")) as engine:
            upstream = Upstream()
            with pytest.raises(UpstreamBrokenError):
                await exchange(upstream, engine)
            assert engine.connections == 1

    run(test)


def test_a_kept_alive_connection_that_began_to_answer_is_not_retried() -> None:
    async def test() -> None:
        partial = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{"
        async with Engine(close_on_the_second_request(partial)) as engine:
            upstream = Upstream()
            assert await exchange(upstream, engine) == b"{}"
            with pytest.raises(UpstreamBrokenError):
                await exchange(upstream, engine)
            assert engine.connections == 1
            await upstream.close()

    run(test)


def test_a_post_closed_unanswered_well_after_it_was_sent_is_not_retried() -> None:
    async def test() -> None:
        async with Engine(close_a_while_after_the_second_request(0.3)) as engine:
            upstream = Upstream()
            assert await exchange(upstream, engine) == b"{}"
            with pytest.raises(UpstreamBrokenError):
                await exchange(upstream, engine)
            assert engine.connections == 1
            await upstream.close()

    run(test)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_an_idempotent_request_closed_unanswered_on_a_reused_connection_is_retried(
    method: str,
) -> None:
    async def test() -> None:
        async with Engine(close_a_while_after_the_second_request(0.3)) as engine:
            upstream = Upstream()
            assert await exchange(upstream, engine) == b"{}"
            answer = await upstream.request(engine.url, method, "/", [], b"", 5)
            assert answer.status == 200 and await answer.read(1024) == b"{}"
            assert engine.connections == 2
            answer.release()
            await upstream.close()

    run(test)


def test_a_post_with_an_idempotency_key_is_retried_like_an_idempotent_one() -> None:
    async def test() -> None:
        async with Engine(close_a_while_after_the_second_request(0.3)) as engine:
            upstream = Upstream()
            assert await exchange(upstream, engine) == b"{}"
            headers = [("Idempotency-Key", "k1")]
            answer = await upstream.request(engine.url, "POST", "/", headers, b"{}", 5)
            assert await answer.read(1024) == b"{}"
            assert engine.connections == 2
            answer.release()
            await upstream.close()

    run(test)


def test_keepalive_of_zero_uses_one_connection_per_request() -> None:
    async def test() -> None:
        async with Engine(keep_answering()) as engine:
            upstream = Upstream(keepalive_s=0)
            assert await exchange(upstream, engine) == b"{}"
            assert await exchange(upstream, engine) == b"{}"
            assert engine.connections == 2
            await upstream.close()

    run(test)


@pytest.mark.parametrize(("value", "expected"), [(None, 4.0), ("", 4.0), ("7.5", 7.5), ("0", 0.0)])
def test_the_engine_keepalive_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: float
) -> None:
    monkeypatch.setenv("WHARF_SECRET_KEY", "secret")
    if value is None:
        monkeypatch.delenv("WHARF_GATEWAY_UPSTREAM_KEEPALIVE", raising=False)
    else:
        monkeypatch.setenv("WHARF_GATEWAY_UPSTREAM_KEEPALIVE", value)
    assert load_settings().upstream_keepalive == expected


@pytest.mark.parametrize("value", ["-1", "nan", "99999"])
def test_refuses_an_engine_keepalive_out_of_range(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("WHARF_SECRET_KEY", "secret")
    monkeypatch.setenv("WHARF_GATEWAY_UPSTREAM_KEEPALIVE", value)
    with pytest.raises(ConfigError, match="WHARF_GATEWAY_UPSTREAM_KEEPALIVE"):
        load_settings()
