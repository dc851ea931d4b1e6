"""This node's engines' own metrics, scraped every contracts.engine_load.INTERVAL seconds from a
thread of the worker and kept in Redis as contracts.engine_load lays them out: the newest
sample (for the gateways' routing and the autoscaler) and a short series (for the console).

Each engine is read by its own task in a small pool, with a hard 1 s deadline, and its sample
written as soon as it is read: a slow or hung engine delays no other. vLLM serves /metrics
through its front (gateway.front) with the instance's engine key. An engine, Redis or database
error is logged (once a minute per engine and kind) and the loop goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import httpx
import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from contracts import engine_load, engine_tls
from contracts.engine_metrics import MAX_TEXT, MetricsError, read
from controlplane.metrics.targets import MetricsPaths, Target, ready_targets
from controlplane.services.models import Instance

log = logging.getLogger(__name__)
TIMEOUT = 1.0  # seconds an engine has to send its whole page
POOL = 16  # engines read at once
QUIET = 60.0  # seconds between two log lines about one engine's (or Redis') same trouble


class Scraper(threading.Thread):
    """Scrapes the ready engines of node `node` until stop(); `where`, the instances it reads
    when not the node's (the cluster's pods, for a worker of WHARF_RUNTIME=kubernetes)."""

    def __init__(
        self,
        node: str,
        redis_url: str | None = None,
        interval: float = engine_load.INTERVAL,
        where: dict | None = None,
    ):
        super().__init__(name="wharf-engine-scraper", daemon=True)
        self.node, self.interval = node, interval
        self.where = where if where is not None else {"node": node}
        url = redis_url or settings.REDIS_URL
        self.store = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        self.paths = MetricsPaths()
        self._stopped = threading.Event()
        self._logged: dict[str, float] = {}  # a trouble's key -> when it was last logged
        self._busy: set[str] = set()  # instances being read
        self._lock = threading.Lock()  # both are written from the pool's threads
        self._http = httpx.Client(timeout=TIMEOUT, trust_env=False,
                                  verify=engine_tls.client_context())  # fmt: skip
        self._pool = ThreadPoolExecutor(POOL, thread_name_prefix="wharf-scrape")

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                started = time.monotonic()
                close_old_connections()  # the database may have closed an idle one
                self.scrape_once()
                self._stopped.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._http.close()
            connection.close()  # this thread's own

    def stop(self) -> None:
        self._stopped.set()

    def scrape_once(self) -> int:
        """Read every ready engine of this node once; how many samples were written."""
        try:
            targets = ready_targets(Instance.objects.filter(**self.where), self.paths)
        except DatabaseError as exc:
            self._warn("database", "node %s: cannot list its instances: %s", self.node, exc)
            return 0
        except Exception:  # a thread that dies silently would leave every sample stale
            log.exception("node %s: the engine scraper failed", self.node)
            return 0
        return self._scrape_all(targets)

    def _scrape_all(self, targets: list[Target]) -> int:
        """Each engine in its own task; waits one interval at most. An engine still being read
        from the last pass is skipped, so a hung one takes one task, never the whole pool."""
        with self._lock:
            targets = [t for t in targets if t.instance.name not in self._busy]
            self._busy.update(t.instance.name for t in targets)
        futures = [self._pool.submit(self._scrape, t) for t in targets]
        done, _ = wait(futures, timeout=self.interval)
        return sum(f.result() for f in done)

    def _scrape(self, target: Target) -> int:
        name = target.instance.name
        try:
            text = self._fetch(target.metrics_url, target.instance.engine_key())
            sample, adapters = read(text, time.time())
            write(self.store, name, sample, adapters)
        except (httpx.HTTPError, MetricsError) as exc:
            self._warn(f"engine {name}", "instance %s: no engine metrics from %s: %s", name,
                       target.metrics_url, exc)  # fmt: skip
            return 0
        except redis.RedisError as exc:
            self._warn("redis", "engine metrics not kept: Redis: %s", exc)
            return 0
        finally:
            with self._lock:
                self._busy.discard(name)
        return 1

    def _fetch(self, url: str, key: str) -> str:
        """The page, read within TIMEOUT seconds in all (httpx's timeout bounds each read
        only, so an engine sending a byte a second would hold the task) and MAX_TEXT bytes."""
        deadline = time.monotonic() + TIMEOUT
        body = bytearray()
        headers = {"Authorization": f"Bearer {key}"}
        with self._http.stream("GET", url, headers=headers) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_TEXT:
                    raise MetricsError(f"the metrics page is over {MAX_TEXT} bytes")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"the page took over {TIMEOUT} s")
        return body.decode("utf-8", errors="replace")

    def _warn(self, key: str, message: str, *args: object) -> None:
        """Log `message` unless the same trouble (`key`) was logged within QUIET seconds."""
        now = time.monotonic()
        with self._lock:
            last = self._logged.get(key)
            if last is not None and now - last < QUIET:
                return
            if len(self._logged) > 1000:  # instances come and go: forget old troubles
                self._logged = {k: t for k, t in self._logged.items() if now - t < QUIET}
            self._logged[key] = now
        log.warning(message, *args)


def write(
    store: redis.Redis, instance: str, sample: dict[str, float],
    adapters: frozenset[str] | None = None,
) -> None:  # fmt: skip
    """The newest sample (it lasts STALE seconds), the series and, for an engine serving
    LoRA adapters, the adapters it uses now, in one round trip."""
    raw = engine_load.encode(sample)
    series = engine_load.series_key(instance)
    pipe = store.pipeline(transaction=True)
    pipe.set(engine_load.latest_key(instance), raw, ex=engine_load.STALE)
    if adapters is not None:
        pipe.set(engine_load.adapters_key(instance), engine_load.encode_adapters(adapters),
                 ex=engine_load.STALE)  # fmt: skip
    pipe.lpush(series, raw)
    pipe.ltrim(series, 0, engine_load.KEEP - 1)
    pipe.expire(series, engine_load.SERIES_TTL)
    pipe.execute()
