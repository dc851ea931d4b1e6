"""Services' request logs through a real gateway: written when the spec asks, absent by
default, cut at the service's cap, old days deleted, and no call slowed or failed by them."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from gateway_support import Engine, Gateway, make_token, service, snapshot, unique

from contracts.routing import RequestLogRouting, Snapshot
from contracts.spec import SpecError, parse_spec
from contracts.spec_request_log import logged
from gateway.observe.request_log import RequestLog, expired

pytestmark = pytest.mark.timeout(60)


def _call(gateway: Gateway, token: str, model: str, prompt: str, **body) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/completions",
        json={"model": model, "prompt": prompt, "max_tokens": 3, **body},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10, trust_env=False,
    )  # fmt: skip


def _entries(folder: Path, seconds: float = 5, count: int = 1) -> list[dict]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = [line for path in sorted(folder.glob("*.jsonl")) for line in
                 path.read_text().splitlines()] if folder.is_dir() else []  # fmt: skip
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        time.sleep(0.05)
    raise AssertionError(f"{count} entries not written in {folder}")


def _deploy(
    start_gateway: Callable[..., Gateway],
    engine: Engine,
    folder: Path,
    log: RequestLogRouting | None,
) -> tuple[Gateway, str, str]:
    token, digest = make_token()
    name = unique("logged")
    svc = replace(service(name, [engine.instance], [digest], models=(name,)), request_log=log)
    return start_gateway(snapshot(1, svc), request_log_dir=str(folder)), token, name


def test_a_service_that_asks_has_its_prompts_and_answers_kept(
    start_gateway: Callable[..., Gateway], engines: list[Engine], tmp_path: Path
) -> None:
    log = RequestLogRouting(keep_days=3, max_body_bytes=4096)
    gateway, token, name = _deploy(start_gateway, engines[0], tmp_path, log)
    plain = _call(gateway, token, name, "tell me a story")
    streamed = _call(gateway, token, name, "and another", stream=True)
    assert plain.status_code == streamed.status_code == 200
    entries = _entries(tmp_path / name, count=2)
    first, second = sorted(entries, key=lambda e: e["time"])
    assert first["request_id"] == plain.headers["x-request-id"]
    assert json.loads(first["request"])["prompt"] == "tell me a story"
    assert json.loads(first["response"]) == plain.json()
    assert (first["status"], first["service"], first["path"]) == (200, name, "/v1/completions")
    assert (first["prompt_tokens"], first["completion_tokens"]) == (4, 3)
    assert first["truncated"] is False
    assert second["response"] == streamed.text  # what the caller got, event by event
    assert second["completion_tokens"] == 3
    (path,) = (tmp_path / name).glob("*.jsonl")
    assert path.name.startswith(datetime.now(UTC).date().isoformat())
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)


def test_no_log_by_default(
    start_gateway: Callable[..., Gateway], engines: list[Engine], tmp_path: Path
) -> None:
    gateway, token, name = _deploy(start_gateway, engines[0], tmp_path, None)
    assert _call(gateway, token, name, "private").status_code == 200
    logged_one, other_token, other = _deploy(
        start_gateway, engines[0], tmp_path, RequestLogRouting(1, 100)
    )
    assert _call(logged_one, other_token, other, "kept").status_code == 200
    _entries(tmp_path / other)  # the logged service's entry is out, so the other's would be
    assert not (tmp_path / name).exists()


def test_bodies_are_cut_at_the_service_s_cap(
    start_gateway: Callable[..., Gateway], engines: list[Engine], tmp_path: Path
) -> None:
    gateway, token, name = _deploy(start_gateway, engines[0], tmp_path, RequestLogRouting(1, 20))
    assert _call(gateway, token, name, "x" * 500).status_code == 200
    (entry,) = _entries(tmp_path / name)
    assert len(entry["request"]) == len(entry["response"]) == 20
    assert entry["truncated"] is True


def test_old_days_are_deleted_by_each_service_s_retention(
    start_gateway: Callable[..., Gateway], engines: list[Engine], tmp_path: Path
) -> None:
    today = datetime.now(UTC).date()
    name = unique("kept")
    gone = unique("gone")  # a service no longer logging: the default 7 days

    def day_file(service: str, days_ago: int) -> Path:
        folder = tmp_path / service
        folder.mkdir(exist_ok=True)
        path = folder / f"{(today - timedelta(days=days_ago)).isoformat()}-host-1.jsonl"
        path.write_text("{}\n")
        return path

    old, recent = day_file(name, 3), day_file(name, 2)
    stale, within = day_file(gone, 8), day_file(gone, 6)
    token, digest = make_token()
    svc = replace(service(name, [engines[0].instance], [digest], models=(name,)),
                  request_log=RequestLogRouting(keep_days=3, max_body_bytes=100))  # fmt: skip
    start_gateway(snapshot(1, svc), request_log_dir=str(tmp_path))
    deadline = time.monotonic() + 5
    while (old.exists() or stale.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not old.exists() and not stale.exists()
    assert recent.exists() and within.exists()


def test_a_log_that_cannot_be_written_fails_no_call(
    start_gateway: Callable[..., Gateway], engines: list[Engine], tmp_path: Path
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    gateway, token, name = _deploy(start_gateway, engines[0], blocked, RequestLogRouting(1, 100))
    for _ in range(3):
        assert _call(gateway, token, name, "still answered").status_code == 200


def test_the_queue_is_bounded_and_drops_past_it(tmp_path: Path) -> None:
    request_log = RequestLog(tmp_path, buffer_bytes=1000)
    for i in range(50):
        request_log.add("svc", {"request": "x" * 90, "i": i})
    assert 0 < request_log._queued_bytes <= 1000
    assert request_log.dropped == 50 - len(request_log._queue) > 0


@pytest.mark.parametrize(
    ("keep_days", "names", "gone"),
    [
        (1, ["2026-11-28-h-1.jsonl", "2026-11-27-h-1.jsonl"], ["2026-11-27-h-1.jsonl"]),
        (3, ["2026-11-26-h-1.jsonl", "2026-11-25-h-2.jsonl"], ["2026-11-25-h-2.jsonl"]),
        (7, ["2026-11-20-h-1.jsonl", "2026-11-22-h-1.jsonl"], ["2026-11-20-h-1.jsonl"]),
        (1, ["notes.txt", "2020-01-01.txt", "garbage.jsonl"], []),
    ],
)
def test_expired(keep_days: int, names: list[str], gone: list[str]) -> None:
    assert expired(names, date(2026, 11, 28), keep_days) == gone


def test_the_snapshot_carries_the_log_settings() -> None:
    svc = replace(service("s", [], []), request_log=RequestLogRouting(5, 1024))
    loaded = Snapshot.from_json(snapshot(1, svc, service("t", [], [])).to_json())
    assert loaded.services["s"].request_log == RequestLogRouting(5, 1024)
    assert loaded.services["t"].request_log is None


@pytest.mark.parametrize(
    ("request_log", "field"),
    [
        ({"enabled": True, "keep_days": 0}, "request_log.keep_days"),
        ({"enabled": True, "max_body_bytes": 2 * 1024 * 1024}, "request_log.max_body_bytes"),
        ({"enabled": True, "store": "s3"}, "request_log.store"),
    ],
)
def test_bad_log_settings_name_their_field(request_log: dict, field: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({"name": "s", "containers": [{"image": "i", "port": 8000}],
                    "request_log": request_log})  # fmt: skip
    assert field in raised.value.errors


@pytest.mark.parametrize(
    ("request_log", "kept"), [(None, None), ({"keep_days": 3}, None), ({"enabled": True}, 7)]
)
def test_only_an_enabled_log_is_kept(request_log: dict | None, kept: int | None) -> None:
    data = {"name": "s", "containers": [{"image": "i", "port": 8000}]}
    settings = logged(parse_spec({**data, "request_log": request_log}))
    assert (settings.keep_days if settings else None) == kept


def test_files_are_named_by_process(tmp_path: Path) -> None:
    request_log = RequestLog(tmp_path)
    request_log.add("svc", {"i": 1})
    request_log._write(request_log._take())
    (path,) = (tmp_path / "svc").iterdir()
    assert path.name.endswith(f"-{os.getpid()}.jsonl")
