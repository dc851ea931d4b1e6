"""What an API call costs (issue 31: API call latency), in one run, on PostgreSQL:

    .venv/bin/python benchmarks/api_calls.py [--calls 200] [--creates 80]

First a create's own cost in process (Django's test client), once the workspace holds 100, 300
and 600 services: it should not grow with them. Then a real API process (uvicorn, as `python
-m controlplane` starts it), started twice: with WHARF_API_DB_POOL=0 (a session of its own for
every request, as before the pool) and with the default pool. Printed side by side: the new
process's first eight creates, eight at once, as soon as it answers /healthz (what a burst
meets after the API restarts); then, once warm, creates eight at once, then `GET
/api/v1/services` (the services just made) one call at a time and eight at once (p50 and p99,
ms); the PostgreSQL sessions opened per 100 calls and the API's CPU ms per call. DATABASE_URL
(default the PostgreSQL database `wharf_fleetsim`) is migrated and flushed; Redis is a
redis-server of the run's own; no worker runs, so the services created stay pending.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DATABASE_URL", "postgresql://wharf:wharf@127.0.0.1:5432/wharf_fleetsim")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from benchmarks.fleet_sim import figures  # noqa: E402
from benchmarks.fleet_sim.phases import api_token, service_spec  # noqa: E402
from benchmarks.fleet_sim.stack import private_redis  # noqa: E402
from benchmarks.harness import Processes, free_port, wait_http  # noqa: E402
from controlplane.services.models import Service  # noqa: E402

AT_ONCE = 8  # clients calling together
SETTINGS = (("a session per request", "0"), ("pool (default)", ""))


def sessions_opened() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def timed(call, count: int, at_once: int) -> list[float]:
    """Seconds each of `count` calls took, `at_once` at a time."""

    def one(index: int) -> float:
        began = time.perf_counter()
        call(index)
        return time.perf_counter() - began

    with ThreadPoolExecutor(at_once) as pool:
        return list(pool.map(one, range(count)))


def measure(pool: str, redis_url: str, token: str, calls: int, creates: int) -> dict:
    """The figures of one API process started with WHARF_API_DB_POOL=`pool` ("": default)."""
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "WHARF_HOME": tempfile.mkdtemp(),
        "WHARF_SECRET_KEY": settings.SECRET_KEY,
        "WHARF_TOKEN_KEY": settings.WHARF_TOKEN_KEY,
    }
    if pool:
        env["WHARF_API_DB_POOL"] = pool
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Processes() as procs:
        procs.start("api", [sys.executable, "-m", "uvicorn", "controlplane.asgi:application",
                            "--host", "127.0.0.1", "--port", str(port), "--no-access-log"],
                    env=env)  # fmt: skip
        wait_http(f"{url}/healthz", procs, 60)
        clients = [httpx.Client(base_url=url, headers={"Authorization": token}, timeout=60,
                                trust_env=False) for _ in range(AT_ONCE)]  # fmt: skip
        for client in clients:  # connected, so that the first calls time the API alone
            client.get("/healthz")

        def listed(index: int) -> None:
            answer = clients[index % AT_ONCE].get("/api/v1/services")
            assert answer.status_code == 200, answer.text

        def created(index: int) -> None:
            answer = clients[index % AT_ONCE].post("/api/v1/services", json=service_spec(index))
            assert answer.status_code == 201, answer.text

        first = timed(lambda index: created(creates + index), AT_ONCE, AT_ONCE)
        timed(listed, 20, AT_ONCE)  # warm: the pool's connections
        sessions, cpu = sessions_opened(), procs.cpu_seconds("api")
        made = timed(created, creates, AT_ONCE)
        one_by_one = timed(listed, calls, 1)  # the services just made, listed
        together = timed(listed, calls, AT_ONCE)
        total = 2 * calls + creates
        time.sleep(1)  # a session that ended is counted by then
        opened = sessions_opened() - sessions
        cpu = procs.cpu_seconds("api") - cpu
        for client in clients:
            client.close()
    Service.objects.all().delete()  # the next setting lists as many
    return {
        f"first {AT_ONCE} creates, at once: p50 / p99 ms": pair(first),
        "GET services, one at a time: p50 / p99 ms": pair(one_by_one),
        f"GET services, {AT_ONCE} at once: p50 / p99 ms": pair(together),
        f"create, {AT_ONCE} at once: p50 / p99 ms": pair(made),
        "sessions opened per 100 calls": f"{100 * opened / total:.1f}",
        "API CPU ms per call": f"{1000 * cpu / total:.2f}",
    }


def create_cost(token: str, sizes: tuple[int, ...], each: int = 30) -> str:
    """A create's own cost, in process (Django's test client, no HTTP, no other call at once),
    once the workspace holds each of `sizes` services: the median of `each` creates. Its
    checks read only what they need, so it should not grow with the services."""
    client = Client(HTTP_AUTHORIZATION=token, SERVER_NAME="localhost")
    made, found = 0, []

    def create() -> None:
        nonlocal made
        answer = client.post(
            "/api/v1/services", service_spec(made), content_type="application/json"
        )
        assert answer.status_code == 201, answer.content
        made += 1

    for size in sizes:
        while made < size:
            create()
        found.append(f"{size}: {1000 * statistics.median(timed(lambda _: create(), each, 1)):.1f}")
    Service.objects.all().delete()
    return "create in process, median ms, with N services in the workspace: " + "; ".join(found)


def pair(seconds: list[float]) -> str:
    p50, p99 = (1000 * figures.percentile(seconds, q) for q in (50, 99))
    return f"{p50:.1f} / {p99:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="GETs per way")
    parser.add_argument("--creates", type=int, default=80)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    token = api_token()
    print(create_cost(token, (100, 300, 600)))
    folder = Path(tempfile.mkdtemp(prefix="api-calls-"))
    redis_server, redis_url = private_redis(folder)
    try:
        columns = [(name, measure(pool, redis_url, token, args.calls, args.creates))
                   for name, pool in SETTINGS]  # fmt: skip
    finally:
        redis_server.terminate()
    rows = list(columns[0][1])
    width = max(len(row) for row in rows)
    print(f"{'':{width}} | " + " | ".join(name for name, _ in columns))
    for row in rows:
        print(f"{row:{width}} | " + " | ".join(values[row] for _, values in columns))


if __name__ == "__main__":
    main()
