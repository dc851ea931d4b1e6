"""Fleet operations under load, on the whole system: requests failed during a rolling update, a
scale-down and a node drain, done Wharf's way and, in the same run, the naive way; how long
an engine killed with SIGKILL takes to serve again, with the default back-off and with 1 s; and
how long a service takes to serve again from another node when its node dies.

    .venv/bin/python benchmarks/fleet.py [--threads 6] [--op-rounds 2] [--rounds 3] [--redis URL]

Two nodes on this machine: the stack's own worker (node `a`, 127.0.0.1, default back-off of
10 s) and a second worker started as another host would start it (`manage.py worker --node b
--address 127.0.0.12`, WHARF_BACKOFF_BASE=1). The engine is tests/engines/slow_engine.py: every
answer takes 1.5 s (10 pieces 0.15 s apart), so streams are in flight whenever an instance
goes. Client threads send requests back to back through the gateway, in turn streamed and not,
OpenAI and EAS form; a request fails unless it is a 200 with every piece (and [DONE]).

Wharf's way is the default spec: rolling_strategy max_surge 1, max_unavailable 0 (new instances
first), termination_grace_period 30 s (a removed instance leaves routing and stops once the
gateways report none of its requests in flight). The naive way is the same spec with
max_surge 0, max_unavailable 100% and termination_grace_period 0: every old instance stopped at
once, then the new ones started, with nothing waiting for requests in flight. Redis database 6
(or --redis's), SQLite under a temporary home (PostgreSQL `wharf_rollouts_bench` when
DATABASE_URL is set).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.rollout_support import (  # noqa: E402
    Result,
    Traffic,
    call,
    engine_pids,
    events,
    instances,
    slow_spec,
    start_own_system,
)
from tests.system import System  # noqa: E402

REDIS_DB = 6
NODE_B = ("b", "127.0.0.12")
NAIVE = {"rolling_strategy": {"max_surge": 0, "max_unavailable": "100%"},
         "metadata": {"termination_grace_period": 0}}  # fmt: skip


def wait(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(interval)
    raise SystemExit(f"not {what} within {timeout} s")


def start_node_b(system: System) -> subprocess.Popen:
    env = {**system.stack.env, "WHARF_BACKOFF_BASE": "1", "WHARF_NODE_LABELS": "resource=b"}
    log = open(system.stack.logs / "worker-b.log", "ab")  # noqa: SIM115 (the process's own)
    return subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "worker", "--node", NODE_B[0], "--address",
         NODE_B[1], "--labels", "resource=b", "--concurrency", "2"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def stop_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def nodes_ready(system: System) -> bool:
    with system.api() as api:
        states = {n["name"]: n["state"] for n in api.get("/nodes").json()}
    return states.get("a") == "ready" and states.get("b") == "ready"


def settled(system: System, name: str, count: int, spec_hash: str | None = None):
    rows = instances(system, name)
    ready = [r for r in rows if r["state"] == "ready" and spec_hash in (None, r["spec_hash"])]
    return rows if len(rows) == len(ready) == count else None


def current_hash(system: System, name: str) -> str:
    with system.api() as api:
        (version,) = [v for v in api.get(f"/services/{name}/versions").json() if v["current"]]
    return version["spec_hash"]


def spec(name: str, way: str, instances_: int, version: str = "1") -> dict:
    return slow_spec(name, instances_, version, **(NAIVE if way == "naive" else {}))


def deploy(system: System, body: dict) -> str:
    with system.api() as api:
        created = api.post("/services", json=body)
        assert created.status_code == 201, created.text
    wait(lambda: settled(system, body["name"], body["metadata"]["instance"]), 120, "deployed")
    return created.json()["token"]


def put(system: System, body: dict) -> None:
    with system.api() as api:
        response = api.put(f"/services/{body['name']}", json=body)
        assert response.status_code == 200, response.text


def delete(system: System, name: str) -> None:
    with system.api() as api:
        api.delete(f"/services/{name}")
    wait(lambda: not instances_left(system, name), 120, f"{name} removed")


def instances_left(system: System, name: str) -> bool:
    with system.api() as api:
        response = api.get(f"/services/{name}/instances")
    return response.status_code == 200 and bool(response.json())


def merged(outcomes: list[Outcome]) -> Outcome:
    """Several rounds of one operation as one: counts added, times the median."""
    total = Outcome([], statistics.median(o.seconds for o in outcomes))
    for o in outcomes:
        total.total += o.total
        total.failed += o.failed
        total.refused += o.refused
        total.cut += o.cut
        total.outage += o.outage
    return total


class Outcome:
    """The requests in flight while one operation ran: those that ended after it began and
    started before the gateway served every client again."""

    def __init__(self, results: list[Result], seconds: float) -> None:
        self.total = len(results)
        self.failed = [r for r in results if not r.ok]
        # Refused: the gateway had no ready instance (503). Cut: a request an instance took
        # and never finished (a broken stream, a 502, no answer).
        self.refused = [r for r in self.failed if r.status == 503]
        self.cut = [r for r in self.failed if r.status != 503]
        self.seconds = seconds
        self.outage = (
            max(r.ended for r in self.refused) - min(r.started for r in self.refused)
            if self.refused
            else 0.0
        )

    def cell(self) -> str:
        return f"{len(self.cut):>3} {len(self.refused):>4} {self.outage:>6.1f}s {self.total:>5}"


def operate(traffic: Traffic, action, done, timeout: float = 180) -> Outcome:
    """Run `action` under the traffic until `done` says the instances have settled and the
    gateway serves every client again (the outage of the naive way lasts past the rows'
    settling, until the snapshot with the new instances is out)."""
    start = time.monotonic()
    action()
    wait(done, timeout, "settled")
    settled_at = time.monotonic()
    took = settled_at - start

    def serving() -> bool:
        recent = traffic.between(settled_at)
        return sum(r.ok for r in recent) >= 2 * traffic.threads and recent[-1].ok

    wait(serving, 60, "serving again", 0.1)
    end = time.monotonic()
    results = [r for r in traffic.between(0) if r.ended >= start and r.started < end]
    return Outcome(results, took)


def operations(system: System, way: str, threads: int, round_: int) -> dict[str, Outcome]:
    """Update, scale-down and node drain of one service under steady load."""
    name = f"bench-{way}-{round_}"
    token = deploy(system, spec(name, way, 3))
    traffic = Traffic(system.stack.gateway_url, name, token, threads=threads).start()
    outcomes = {}
    try:
        time.sleep(3)
        put_v2 = lambda: put(system, spec(name, way, 3, "2"))  # noqa: E731
        outcomes["rolling update (3 instances)"] = operate(
            traffic, put_v2, lambda: settled(system, name, 3, current_hash(system, name))
        )
        outcomes["scale-down 3 -> 1"] = operate(
            traffic, lambda: put(system, spec(name, way, 1, "2")),
            lambda: settled(system, name, 1),
        )  # fmt: skip
        put(system, spec(name, way, 2, "2"))  # one instance on each node
        rows = wait(lambda: settled(system, name, 2), 120, "scaled up")
        assert sorted(r["node"] for r in rows) == ["a", "b"], rows
        time.sleep(2)

        def drain_b() -> None:
            with system.api() as api:
                assert api.post("/nodes/b/drain").status_code == 202

        def moved():
            rows = settled(system, name, 2)
            return rows if rows and all(r["node"] == "a" for r in rows) else None

        outcomes["node drain (1 of 2 instances)"] = operate(traffic, drain_b, moved)
        with system.api() as api:
            api.post("/nodes/b/uncordon")
    finally:
        traffic.stop()
    delete(system, name)
    return outcomes


class FirstAnswer:
    """Polls a service through the gateway with short requests from start until one is
    answered after `arm()`; `wait()` gives the seconds from arm to that answer."""

    def __init__(self, system: System, name: str, token: str) -> None:
        self.system, self.name, self.token = system, name, token
        self.armed_at = 0.0
        self.answered: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def arm(self) -> None:
        self.armed_at = time.monotonic()

    def wait(self, timeout: float) -> float:
        self._thread.join(timeout)
        self._stop.set()
        return self.answered - self.armed_at if self.answered else float("nan")

    def _poll(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                result = call(client, self.system.stack.gateway_url, self.name, self.token,
                              "openai-json", tokens=1)  # fmt: skip
                if result.ok and self.armed_at and result.started > self.armed_at:
                    self.answered = result.started
                    return
                if not result.ok:
                    time.sleep(0.05)


def since(log: list[dict], reason: str, at: float, message: str = "") -> float:
    """Seconds from `at` (wall clock) to the first event of `reason` after it."""
    times = [_at(e) for e in log
             if e["reason"] == reason and message in e["message"] and _at(e) >= at]  # fmt: skip
    return min(times) - at if times else float("nan")


def recovery(system: System, node: str, round_: int) -> dict[str, float]:
    """Seconds from kill -9 of a lone instance's engine to: the exit seen, the engine started
    again, ready, and the first request answered through the gateway."""
    name = f"crash-{node}-{round_}"
    token = deploy(system, slow_spec(name, 1, metadata={"resource": node}))
    (pid,) = engine_pids(system, name).values()
    poller = FirstAnswer(system, name, token)
    time.sleep(2)
    killed_at = time.time()
    poller.arm()
    os.kill(pid, signal.SIGKILL)
    routed = poller.wait(120)
    log = events(system, name)
    result = {
        "exit seen": since(log, "InstanceExited", killed_at),
        "restarted": since(log, "InstanceStarted", killed_at),
        "ready": since(log, "InstanceReady", killed_at),
        "routed": routed,
    }
    delete(system, name)
    return result


def node_death(
    system: System, node_b: subprocess.Popen
) -> tuple[dict[str, float], subprocess.Popen]:
    """Seconds from kill -9 of node b's worker and engines (the host is gone) to: the node
    seen not_ready, its instance placed on node a, ready there, and the first request
    answered; then node b is started again (returned)."""
    name = "lost-node"
    with system.api() as api:
        api.post("/nodes/a/cordon")  # so that the instance lands on b
    token = deploy(system, slow_spec(name, 1))
    with system.api() as api:
        api.post("/nodes/a/uncordon")
    pids = engine_pids(system, name)
    poller = FirstAnswer(system, name, token)
    time.sleep(2)
    killed_at = time.time()
    poller.arm()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node_b.pid, signal.SIGKILL)
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    node_b.wait()

    def not_ready() -> float | None:
        with system.api() as api:
            state = api.get("/nodes/b").json()["state"]
        return time.time() - killed_at if state == "not_ready" else None

    seen = wait(not_ready, 120, "node b not_ready", 0.5)
    routed = poller.wait(300)
    log = events(system, name)
    result = {
        "not_ready": seen,
        "placed on a": since(log, "InstanceCreated", killed_at, "node a"),
        "ready": since(log, "InstanceReady", killed_at),
        "routed": routed,
    }
    node_b = start_node_b(system)
    wait(lambda: nodes_ready(system), 90, "node b back", 1)
    delete(system, name)
    return result, node_b


def _at(event: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["created_at"].replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=6, help="client threads")
    parser.add_argument("--rounds", type=int, default=3, help="kills per back-off setting")
    parser.add_argument("--op-rounds", type=int, default=2, help="runs of each operation")
    parser.add_argument("--redis", default=os.environ.get("WHARF_TEST_REDIS_URL",
                                                          "redis://127.0.0.1:6379/0"))  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wharf-bench-fleet-") as tmp:
        home = Path(tmp)
        system = start_own_system(home, args.redis, REDIS_DB, "wharf_rollouts_bench",
                                  {"WHARF_NODE_NAME": "a", "WHARF_NODE_LABELS": "resource=a",
                                   "WHARF_NODE_HEARTBEAT": "2"})  # fmt: skip
        node_b = start_node_b(system)
        try:
            wait(lambda: nodes_ready(system), 90, "both nodes ready", 1)
            runs = [
                {way: operations(system, way, args.threads, n) for way in ("wharf", "naive")}
                for n in range(args.op_rounds)
            ]
            ops = {way: {op: merged([run[way][op] for run in runs]) for op in runs[0][way]}
                   for way in ("wharf", "naive")}  # fmt: skip
            kills = {node: [recovery(system, node, n) for n in range(args.rounds)]
                     for node in ("a", "b")}  # fmt: skip
            lost, node_b = node_death(system, node_b)
        finally:
            system.remove_instances()
            stop_group(node_b)
            system.stack.stop()
    report(args, ops, kills, lost)


def report(
    args, ops: dict[str, dict[str, Outcome]], kills: dict[str, list[dict]], lost: dict[str, float]
) -> None:
    print(f"machine: {os.cpu_count()} cores, {platform.python_implementation()} "
          f"{platform.python_version()}; {args.threads} client threads, "
          "1.5 s per request")  # fmt: skip
    print()
    print(f"requests cut, refused (503) and the time refused, sent: sums over {args.op_rounds} "
          "runs of each operation; took: median seconds until the instances settled")  # fmt: skip
    print(f"{'':<31}| {'Wharf (surge + drain)':^25} | {'naive (stop, then start)':^25} |")
    head = f"{'cut':>3} {'503s':>4} {'outage':>7} {'sent':>5}  {'took':>5}"
    print(f"{'operation':<31}| {head} | {head} |")
    for op in ops["wharf"]:
        w, n = ops["wharf"][op], ops["naive"][op]
        print(f"{op:<31}| {w.cell()}  {w.seconds:>4.1f}s | {n.cell()}  {n.seconds:>4.1f}s |")
    details = [f"  {way} {op}: {r.mode} HTTP {r.status} {r.detail[:90]}"
               for way in ops for op, o in ops[way].items() for r in o.cut[:3]]  # fmt: skip
    if details:
        print("cut requests (first of each):")
        print("\n".join(details))
    print()
    print(f"kill -9 of a lone instance's engine: seconds until (median of {args.rounds}, min-max)")
    columns = ("exit seen", "restarted", "ready", "routed")
    print(f"{'back-off base':<16}" + "".join(f"{c:>18}" for c in columns))
    for node, label in (("a", "10 s (default)"), ("b", "1 s")):
        cells = []
        for column in columns:
            values = [k[column] for k in kills[node]]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        print(f"{label:<16}" + "".join(f"{c:>18}" for c in cells))
    print()
    grace, evict = (
        os.environ.get("WHARF_NODE_GRACE", "30"),
        os.environ.get("WHARF_NODE_EVICT", "60"),
    )
    print(
        f"kill -9 of node b (worker and engines), its lone instance moving to node a: seconds "
        f"until (WHARF_NODE_GRACE {grace} s + WHARF_NODE_EVICT {evict} s is the floor)"
    )
    print("".join(f"{c:>16}" for c in lost))
    print("".join(f"{v:>16.1f}" for v in lost.values()))


if __name__ == "__main__":
    main()
