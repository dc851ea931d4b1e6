"""The node's engine scraper (workers.scaling.scraper) against a real vLLM CPU engine serving the
tiny model with prefix caching on, keyed as Wharf starts engines: its samples in the test Redis
after real completions, the series kept and capped, only this node's ready engines read, and
an engine that hangs or answers nonsense holding up nothing."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import redis
from django.conf import settings

from contracts import engine_load
from contracts.engine_keys import engine_key
from contracts.spec import parse_spec
from controlplane.services.models import Instance, Service
from tests import vllm_support
from tests.api_support import default_workspace
from workers.scaling.scraper import Scraper, write

NODE = "scrape-node"
SPEC = {"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
CUSTOM = {"name": "plain", "containers": [{"image": "x", "command": "serve", "port": 8000}]}
PROMPT = "Wharf is a self-hosted control plane for serving large language models. " * 8

pytestmark = pytest.mark.timeout(600)


# Every test given the engine is transactional, as the scraper thread's must be: pytest-django
# runs transactional tests after the others, and a module split in two starts its engine twice.
@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A vLLM CPU engine with prefix caching, requiring instance tiny-0's engine key."""
    from controlplane.services.tiny_model import write_tiny_model

    if not vllm_support.VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM CPU build at {vllm_support.VLLM_VENV} (make engines)")
    model = write_tiny_model(tmp_path_factory.mktemp("scrape-model") / "tiny")
    log = tmp_path_factory.mktemp("scrape-log") / "vllm.log"
    with vllm_support.running(
        model, log, _key("tiny-0"), ["--max-model-len", "512", "--enable-prefix-caching"]
    ) as url:
        yield url  # fmt: skip


def _key(instance: str) -> str:
    return engine_key(settings.WHARF_TOKEN_KEY.encode(), instance)


def _complete(url: str, times: int) -> None:
    """Completions of one prompt over two of vLLM's 128-token CPU cache blocks: the second and
    later hit the prefix cache (only whole blocks are cached)."""
    for _ in range(times):
        response = httpx.post(
            url + "/v1/completions", headers={"Authorization": f"Bearer {_key('tiny-0')}"},
            json={"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "ignore_eos": True},
            timeout=120, trust_env=False,
        )  # fmt: skip
        assert response.status_code == 200, response.text


@pytest.fixture
def store(redis_url) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    names = ("tiny-0", "tiny-1", "tiny-2", "tiny-3", "plain-0", "hung-0", "html-0")
    keys = [k for n in names for k in (engine_load.latest_key(n), engine_load.series_key(n))]
    client.delete(*keys)
    yield client
    client.delete(*keys)


def _instance(spec: dict, name: str, url: str, node: str = NODE, state: str = "ready"):
    service, _ = Service.objects.get_or_create(
        name=spec["name"], defaults={"workspace": default_workspace(), "spec": spec}
    )
    return Instance.objects.create(
        service=service, name=name, runtime="process", node=node, state=state, url=url,
        spec_hash=parse_spec(spec).spec_hash(),
    )  # fmt: skip


def _latest(store: redis.Redis, name: str) -> dict | None:
    return engine_load.decode(store.get(engine_load.latest_key(name)))


@pytest.mark.django_db(transaction=True)
def test_a_sample_shows_the_engines_prefix_cache_and_tokens(vllm, store, redis_url):
    _instance(SPEC, "tiny-0", vllm)
    _complete(vllm, 3)
    before = time.time()
    assert Scraper(NODE, redis_url).scrape_once() == 1
    sample = _latest(store, "tiny-0")
    assert sample is not None and before <= sample["at"] <= time.time()
    assert sample["prefix_queries"] > 0 and 0 < sample["prefix_hits"] <= sample["prefix_queries"]
    assert sample["generation_tokens"] >= 3 * 8 and sample["prompt_tokens"] > 0
    assert sample["ttft_count"] >= 3 and sample["ttft_sum"] > 0
    assert (sample["running"], sample["waiting"]) == (0, 0) and 0 <= sample["kv_cache"] <= 1
    assert 0 < store.ttl(engine_load.latest_key("tiny-0")) <= engine_load.STALE


@pytest.mark.django_db(transaction=True)
def test_the_counters_move_with_the_engines_work(vllm, store, redis_url):
    _instance(SPEC, "tiny-0", vllm)
    scraper = Scraper(NODE, redis_url)
    scraper.scrape_once()
    first = _latest(store, "tiny-0")
    _complete(vllm, 2)
    time.sleep(0.05)
    scraper.scrape_once()
    second = _latest(store, "tiny-0")
    assert first and second
    rates = engine_load.rates(second, first)
    assert second["generation_tokens"] - first["generation_tokens"] >= 16
    assert rates["generation_tps"] > 0 and rates["prefix_hit_rate"] > 0 and rates["ttft"] > 0


@pytest.mark.django_db(transaction=True)
def test_the_series_keeps_every_pass_newest_first(vllm, store, redis_url):
    _instance(SPEC, "tiny-0", vllm)
    scraper = Scraper(NODE, redis_url)
    for _ in range(3):
        assert scraper.scrape_once() == 1
    series = engine_load.series_key("tiny-0")
    samples = [engine_load.decode(raw) for raw in store.lrange(series, 0, -1)]
    times = [s["at"] for s in samples if s]
    assert len(times) == 3 and times == sorted(times, reverse=True)
    assert 0 < store.ttl(series) <= engine_load.SERIES_TTL


def test_the_series_is_capped_at_keep(store):
    for i in range(engine_load.KEEP + 5):
        write(store, "tiny-1", {"at": float(i), "running": 1.0})
    series = engine_load.series_key("tiny-1")
    assert store.llen(series) == engine_load.KEEP
    assert engine_load.decode(store.lindex(series, 0)) == {"at": engine_load.KEEP + 4.0,
                                                          "running": 1.0}  # fmt: skip


def test_an_engine_serving_adapters_has_those_in_use_kept_beside_its_sample(store):
    write(store, "lora-1", {"at": 1.0}, frozenset({"sql", "chat"}))
    kept = store.get(engine_load.adapters_key("lora-1"))
    assert engine_load.decode_adapters(kept) == {"sql", "chat"}
    assert 0 < store.ttl(engine_load.adapters_key("lora-1")) <= engine_load.STALE
    write(store, "plain-1", {"at": 1.0})  # no LoRA: nothing kept
    assert store.get(engine_load.adapters_key("plain-1")) is None
    assert engine_load.decode_adapters(b"{not json") == frozenset()


@pytest.mark.django_db(transaction=True)
def test_only_this_nodes_ready_engines_with_a_metrics_page_are_read(vllm, store, redis_url):
    _instance(SPEC, "tiny-0", vllm, node="another-node")
    _instance(SPEC, "tiny-1", vllm, state="starting")
    _instance(SPEC, "tiny-2", "")  # ready, yet no address reported
    _instance(CUSTOM, "plain-0", vllm)  # a custom command: no metrics path
    _instance(SPEC, "tiny-3", vllm)
    assert Scraper(NODE, redis_url).scrape_once() == 1
    assert _latest(store, "tiny-3") is not None
    for name in ("tiny-0", "tiny-1", "tiny-2", "plain-0"):
        assert not store.exists(engine_load.latest_key(name), engine_load.series_key(name)), name


class _Hung(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        time.sleep(5)  # answers nothing in time


class _Html(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"<html><body>502 Bad Gateway</body></html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _server(handler) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.django_db(transaction=True)
def test_a_hung_engine_holds_up_no_other(vllm, store, redis_url):
    with _server(_Hung) as hung:
        _instance(SPEC, "hung-0", hung)
        _instance(SPEC, "tiny-0", vllm)
        scraper = Scraper(NODE, redis_url)
        started = time.monotonic()
        assert scraper.scrape_once() == 1
        assert time.monotonic() - started < 1.8  # the hung one given up after about 1 s
        assert _latest(store, "tiny-0") is not None and _latest(store, "hung-0") is None


@pytest.mark.django_db
def test_a_page_that_is_not_prometheus_is_logged_once_a_minute(store, redis_url, caplog):
    with _server(_Html) as html:
        _instance(SPEC, "html-0", html)
        scraper = Scraper(NODE, redis_url)
        with caplog.at_level(logging.WARNING, logger="workers.scaling.scraper"):
            assert scraper.scrape_once() == 0
            assert scraper.scrape_once() == 0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "html-0" in warnings[0] and "not Prometheus text" in warnings[0]
    assert _latest(store, "html-0") is None


@pytest.mark.django_db(transaction=True)
def test_redis_away_is_logged_and_the_pass_goes_on(vllm, caplog):
    _instance(SPEC, "tiny-0", vllm)
    scraper = Scraper(NODE, f"redis://127.0.0.1:{vllm_support.free_port()}/0")
    with caplog.at_level(logging.WARNING, logger="workers.scaling.scraper"):
        assert scraper.scrape_once() == 0
    assert "Redis" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_thread_scrapes_every_interval_and_stops_promptly(vllm, store, redis_url):
    _instance(SPEC, "tiny-0", vllm)
    scraper = Scraper(NODE, redis_url, interval=0.3)
    scraper.start()
    try:
        deadline = time.monotonic() + 10
        while store.llen(engine_load.series_key("tiny-0")) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.llen(engine_load.series_key("tiny-0")) >= 3
    finally:
        scraper.stop()
        scraper.join(2)
    assert not scraper.is_alive()
