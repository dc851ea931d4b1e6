"""What the rollout tests (tests/test_rollouts.py) and the fleet benchmark (benchmarks/fleet.py)
share: a whole system on a Redis database and SQLite/PostgreSQL database of their own, a slow
custom engine (tests/engines/slow_engine.py) to deploy on it, and steady client traffic through
the gateway in which every request is checked to the last byte."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.system import System, start_system

ENGINE = Path(__file__).resolve().parent / "engines" / "slow_engine.py"
CHUNKS = 10  # pieces in every answer
CHUNK_DELAY = 0.15  # seconds between pieces: every request is in flight for 1.5 s


def start_own_system(
    home: Path, redis_url: str, db: int, database: str, extra_env: dict[str, str] | None = None
) -> System:
    """tests.system.start_system on the process runtime, with the Redis database number and
    the PostgreSQL database name (when DATABASE_URL is set) given by the caller, so that stacks
    of concurrent suites never share one."""
    return start_system("process", home, home / "models", redis_url, extra_env or {},
                        redis_number=db, database=database, token_name="rollouts",
                        grants={"process_code": True})  # fmt: skip


def slow_spec(name: str, instances: int = 1, version: str = "1", **extra) -> dict:
    """A custom service running the slow engine; `version` (in its env) changes the spec hash."""
    env = [{"name": "VERSION", "value": version}, {"name": "CHUNKS", "value": str(CHUNKS)},
           {"name": "CHUNK_DELAY", "value": str(CHUNK_DELAY)}]  # fmt: skip
    spec = {
        "name": name,
        "containers": [{"image": "slow-engine", "port": 8000, "env": env,
                        "command": f"exec python3 {ENGINE}"}],
        "metadata": {"instance": instances},
        "health_check": {"path": "/health", "period_seconds": 2, "timeout_seconds": 1},
    }  # fmt: skip
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def expected_text(tokens: int = CHUNKS) -> str:
    return "".join(f" {i}" for i in range(tokens))


@dataclass
class Result:
    started: float  # time.monotonic()
    ended: float
    ended_at: float  # time.time(), to compare with events
    mode: str  # "openai-stream", "openai-json", "eas-stream", "eas-json"
    status: int  # 0: no HTTP answer
    ok: bool  # 200 and the whole answer
    detail: str = ""  # what was wrong
    version: str = ""  # the engine version that answered
    instance: str = ""


MODES = ("openai-stream", "openai-json", "eas-stream", "eas-json")


VLLM_TOKENS = 8  # tokens asked of a vLLM engine (ignore_eos: always that many)
VLLM_GAP = 0.25  # s between a thread's calls to a vLLM engine (Traffic.gap)


def call(
    client: httpx.Client,
    gateway: str,
    service: str,
    token: str,
    mode: str,
    engine: str = "slow",
    tokens: int = CHUNKS,
) -> Result:
    """One request through the gateway, checked: 200 and a complete answer (every piece, the
    final event, [DONE] for a stream). `engine`: "slow" (tests/engines/slow_engine.py, whose
    text is known: `tokens` pieces) or "vllm" (any text, but exactly VLLM_TOKENS tokens)."""
    stream = mode.endswith("stream")
    body: dict = {"prompt": "hi", "max_tokens": tokens}
    if engine == "vllm":
        body.update(max_tokens=VLLM_TOKENS, ignore_eos=True, temperature=0)
    if mode.startswith("openai"):
        url = f"{gateway}/v1/completions"
        body["model"] = service
        headers = {"Authorization": f"Bearer {token}"}
    else:
        url = f"{gateway}/api/predict/{service}/v1/completions"
        headers = {"Authorization": token}  # EAS style: the bare token
    if stream:
        body["stream"] = True
        if engine == "vllm":
            body["stream_options"] = {"include_usage": True}
    started = time.monotonic()
    result = Result(started, started, 0.0, mode, 0, False)
    try:
        with client.stream("POST", url, json=body, headers=headers) as response:
            result.status = response.status_code
            result.version = response.headers.get("x-engine-version", "")
            result.instance = response.headers.get("x-wharf-instance", "")
            raw = response.read().decode(errors="replace")
        if engine == "vllm":
            result.detail = _check_vllm(result.status, raw, stream)
        else:
            result.detail = _check(result.status, raw, stream, tokens)
    except httpx.HTTPError as exc:
        result.detail = f"{type(exc).__name__}: {exc}"
    result.ended, result.ended_at = time.monotonic(), time.time()
    result.ok = result.status == 200 and not result.detail
    return result


def _events(raw: str) -> tuple[list[dict], str]:
    """A stream's JSON events, or what is wrong with it."""
    events = [line[5:].strip() for line in raw.splitlines() if line.startswith("data:")]
    if not events or events[-1] != "[DONE]":
        return [], f"the stream did not end with [DONE]: {raw[-200:]!r}"
    try:
        return [json.loads(e) for e in events[:-1]], ""
    except ValueError:
        return [], f"an event is not JSON: {raw[:200]!r}"


def _check_vllm(status: int, raw: str, stream: bool) -> str:
    if status != 200:
        return f"HTTP {status}: {raw[:200]}"
    if stream:
        pieces, wrong = _events(raw)
        if wrong:
            return wrong
        usage = [p["usage"] for p in pieces if p.get("usage")]
        finish = [c.get("finish_reason") for p in pieces for c in p.get("choices", [])]
    else:
        try:
            answer = json.loads(raw)
        except ValueError:
            return f"not a completion: {raw[:200]}"
        usage = [answer.get("usage") or {}]
        finish = [c.get("finish_reason") for c in answer.get("choices", [])]
    tokens = usage[-1].get("completion_tokens") if usage else None
    if tokens != VLLM_TOKENS or finish[-1:] != ["length"]:
        return f"incomplete answer: {tokens} tokens, finish {finish[-1:]}"
    return ""


def _check(status: int, raw: str, stream: bool, tokens: int = CHUNKS) -> str:
    """'' when the answer is complete, else what is wrong with it."""
    if status != 200:
        return f"HTTP {status}: {raw[:200]}"
    if not stream:
        try:
            answer = json.loads(raw)
            text = answer["choices"][0]["text"]
            counted = answer["usage"]["completion_tokens"]
        except (ValueError, KeyError, IndexError, TypeError):
            return f"not a completion: {raw[:200]}"
        if text != expected_text(tokens) or counted != tokens:
            return f"incomplete answer: {text!r}, {counted} tokens"
        return ""
    pieces, wrong = _events(raw)
    if wrong:
        return wrong
    text = "".join(c["text"] for p in pieces for c in p.get("choices", []))
    finish = [c.get("finish_reason") for p in pieces for c in p.get("choices", [])]
    if text != expected_text(tokens) or finish[-1:] != ["length"]:
        return f"incomplete stream: {text!r}, finish {finish[-1:]}"
    return ""


@dataclass
class Traffic:
    """Client threads sending requests one after another through the gateway, in turn
    streamed and not, OpenAI and EAS form, until stopped. `pause()` stops new requests (those
    in flight finish); `resume()` starts them again. `gap`: seconds each thread waits between its
    requests (a real engine on this machine's two cores starts its successor slowly when it
    is kept busy back to back)."""

    gateway: str
    service: str
    token: str
    threads: int = 4
    engine: str = "slow"
    gap: float = 0.0
    results: list[Result] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _paused: threading.Event = field(default_factory=threading.Event)
    _running: list[threading.Thread] = field(default_factory=list)
    _idle: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Traffic:
        for n in range(self.threads):
            thread = threading.Thread(target=self._loop, args=(n,), daemon=True)
            thread.start()
            self._running.append(thread)
        return self

    def _loop(self, n: int) -> None:
        turn = n  # each thread starts on another mode, so all four are always in flight
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                if self._paused.is_set():
                    self._idle.release()
                    while self._paused.is_set() and not self._stop.is_set():
                        time.sleep(0.05)
                    continue
                result = call(client, self.gateway, self.service, self.token,
                              MODES[turn % len(MODES)], self.engine)  # fmt: skip
                turn += 1
                with self._lock:
                    self.results.append(result)
                if not result.ok and result.status in (0, 404, 503):
                    time.sleep(0.1)  # no instance (stopped): do not spin
                if self.gap:
                    self._stop.wait(self.gap)

    def pause(self) -> None:
        """No new requests; returns once every thread has finished the one it was sending."""
        self._paused.set()
        for _ in self._running:
            self._idle.acquire(timeout=120)

    def resume(self) -> None:
        self._paused.clear()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._running:
            thread.join(timeout=120)

    def between(self, since: float, until: float | None = None) -> list[Result]:
        """The requests that started in [since, until)."""
        with self._lock:
            return [r for r in self.results
                    if r.started >= since and (until is None or r.started < until)]  # fmt: skip

    def wait_for(self, count: int, since: float, timeout: float = 30) -> None:
        """Until `count` requests that started after `since` have completed successfully."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(r.ok for r in self.between(since)) >= count:
                return
            time.sleep(0.1)
        raise AssertionError(f"fewer than {count} successful requests in {timeout} s: "
                             f"{summary(self.between(since))}")  # fmt: skip


def summary(results: list[Result]) -> str:
    failed = [r for r in results if not r.ok]
    lines = [f"{len(results)} requests, {len(failed)} failed"]
    lines += [f"  {r.mode} at +{r.started:.1f}: {r.detail}" for r in failed[:10]]
    return "\n".join(lines)


def instances(system: System, name: str) -> list[dict]:
    with system.api() as api:
        return api.get(f"/services/{name}/instances").json()


def events(system: System, name: str) -> list[dict]:
    """Oldest first."""
    with system.api() as api:
        return list(reversed(api.get(f"/services/{name}/events", params={"limit": 1000}).json()))


def wait_until(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"not {what} within {timeout} s")


def engine_pids(system: System, name: str) -> dict[str, int]:
    """Instance name -> pid of its engine, from the process runtime's state files."""
    pids = {}
    for path in (system.stack.home / "instances").glob("*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if state["service"] == name:
            pids[state["name"]] = state["pid"]
    return pids


def deploy(system, spec: dict) -> str:
    """Create the service and wait until it runs; its token."""
    with system.api() as api:
        created = api.post("/services", json=spec)
        assert created.status_code == 201, created.text
    service = system.wait_phase(spec["name"], {"running", "failed"}, timeout=600)
    assert service["phase"] == "running", events(system, spec["name"])
    return created.json()["token"]


def delete(system, name: str) -> None:
    """Delete the service and wait until it is gone."""
    with system.api() as api:
        api.delete(f"/services/{name}")
    system.wait_phase(name, {"gone"}, timeout=120)
