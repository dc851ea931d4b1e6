"""One log format: the formatters (text and JSON lines), the settings that choose them, and
real processes (the API, a worker with its beat) logging in it."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contracts.log_format import (
    REQUEST_ID,
    AccessQueryRedaction,
    JsonFormatter,
    LogConfigError,
    TextFormatter,
    line,
    log_format,
    log_level,
    masked,
    timestamp,
)

ROOT = Path(__file__).resolve().parent.parent
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
# 2026-11-24T10:15:02.371Z, as written for 1795515302.371 (seconds since the epoch)
WHEN = 1795515302.371


def record(message: str, *args: object, level: int = logging.INFO, **extra) -> logging.LogRecord:
    made = logging.LogRecord("wharf.test", level, __file__, 1, message, args or None, None)
    made.created = WHEN
    made.__dict__.update(extra)
    return made


def failed_record() -> logging.LogRecord:
    try:
        raise RuntimeError("engine gone")
    except RuntimeError:
        made = logging.LogRecord("wharf.test", logging.ERROR, __file__, 1, "boom", None,
                                 sys.exc_info())  # fmt: skip
    made.created = WHEN
    return made


# --- formats ------------------------------------------------------------------------------


def test_timestamps_are_utc_iso_8601_with_milliseconds() -> None:
    assert timestamp(WHEN) == "2026-11-24T10:15:02.371Z"
    assert timestamp(0.0) == "1970-01-01T00:00:00.000Z"


def test_text_line_has_timestamp_level_logger_and_message() -> None:
    text = TextFormatter().format(record("instance %s ready", "a"))
    assert text == "2026-11-24T10:15:02.371Z INFO wharf.test: instance a ready"


def test_text_line_ends_with_the_request_id_being_served() -> None:
    token = REQUEST_ID.set("req-7")
    try:
        text = TextFormatter().format(record("upstream failed", level=logging.WARNING))
    finally:
        REQUEST_ID.reset(token)
    assert text == "2026-11-24T10:15:02.371Z WARNING wharf.test: upstream failed request_id=req-7"


def test_text_line_puts_the_traceback_below() -> None:
    first, *rest = TextFormatter().format(failed_record()).splitlines()
    assert first == "2026-11-24T10:15:02.371Z ERROR wharf.test: boom"
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "RuntimeError: engine gone"


def test_json_line_is_one_object_with_the_fields() -> None:
    text = JsonFormatter().format(record("two\nlines, and %d%%", 5))
    assert "\n" not in text
    assert json.loads(text) == {
        "timestamp": "2026-11-24T10:15:02.371Z",
        "level": "INFO",
        "logger": "wharf.test",
        "message": "two\nlines, and 5%",
    }


def test_json_line_carries_the_request_id_from_the_context_or_the_record() -> None:
    token = REQUEST_ID.set("from-context")
    try:
        in_context = json.loads(JsonFormatter().format(record("x")))
    finally:
        REQUEST_ID.reset(token)
    given = json.loads(JsonFormatter().format(record("x", request_id="given")))
    assert (in_context["request_id"], given["request_id"]) == ("from-context", "given")
    assert "request_id" not in json.loads(JsonFormatter().format(record("x")))


def test_json_line_carries_the_traceback() -> None:
    entry = json.loads(JsonFormatter().format(failed_record()))
    assert entry["message"] == "boom" and entry["level"] == "ERROR"
    assert entry["exception"].endswith("RuntimeError: engine gone")


def test_line_writes_in_the_environments_format() -> None:
    json_env = {"WHARF_LOG_FORMAT": "json"}
    as_json = json.loads(line(logging.INFO, "launcher", "starting api", json_env))
    assert (as_json["logger"], as_json["message"]) == ("launcher", "starting api")
    assert TIMESTAMP.fullmatch(as_json["timestamp"])
    as_text = line(logging.INFO, "launcher", "starting api", {})
    assert re.fullmatch(r"\S+Z INFO launcher: starting api", as_text)


# --- secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "logged"),
    [
        ("token wsk-AbCdEf_123-xyz used", "token wsk-****** used"),
        ("key wak-0123456789abcdef", "key wak-******"),
        ("admin wat-Zz9_Zz9_Zz9_Zz9", "admin wat-******"),
        ("Authorization: Bearer sk-live-abcdef", "Authorization: Bearer ******"),
        ("redis://:hunter22@10.0.0.2:6379/0", "redis://:******@10.0.0.2:6379/0"),
        ("postgresql://wharf:pw@db/wharf", "postgresql://wharf:******@db/wharf"),
        ("GET /v1/models from 10.0.0.1", "GET /v1/models from 10.0.0.1"),
    ],
)
def test_secrets_are_masked(given: str, logged: str) -> None:
    assert masked(given) == logged


def test_both_formats_mask_secrets() -> None:
    secret = "wsk-" + "s3cret" * 6
    for formatter in (TextFormatter(), JsonFormatter()):
        assert "s3cret" not in formatter.format(record("bad token %s", secret))


def test_access_lines_lose_the_query_string() -> None:
    # As uvicorn logs it: (client, method, path with query, HTTP version, status).
    args = ("1.2.3.4:5", "GET", "/v1/models?key=abc", "1.1", 200)
    access = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None
    )
    assert AccessQueryRedaction().filter(access)
    assert access.getMessage() == '1.2.3.4:5 - "GET /v1/models HTTP/1.1" 200'


# --- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "chosen"), [("", "text"), ("json", "json"), ("JSON", "json"),
                                               (" text ", "text")])  # fmt: skip
def test_log_format_setting(value: str, chosen: str) -> None:
    assert log_format({"WHARF_LOG_FORMAT": value}) == chosen
    assert log_format({}) == "text"


def test_an_unknown_log_format_names_the_variable() -> None:
    with pytest.raises(LogConfigError, match=r"WHARF_LOG_FORMAT='xml' is not a log format"):
        log_format({"WHARF_LOG_FORMAT": "xml"})


def test_log_level_setting() -> None:
    assert log_level({}) == "INFO"
    assert log_level({"WHARF_LOG_LEVEL": "debug"}) == "DEBUG"
    with pytest.raises(LogConfigError, match=r"WHARF_LOG_LEVEL='loud' is not a log level"):
        log_level({"WHARF_LOG_LEVEL": "loud"})


# --- real processes -----------------------------------------------------------------------


def json_entries(output: str) -> list[dict]:
    """Every line as a JSON object with a timestamp (json.loads fails the test otherwise)."""
    entries = [json.loads(text) for text in output.splitlines()]
    for entry in entries:
        assert TIMESTAMP.fullmatch(entry["timestamp"]), entry
        assert entry["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), entry
    return entries


@pytest.fixture
def process_env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    """A fresh SQLite home, the tests' Redis, JSON lines."""
    return {**os.environ, "WHARF_HOME": str(tmp_path), "DATABASE_URL": "",
            "REDIS_URL": redis_url, "WHARF_LOG_FORMAT": "json", "WHARF_RUNTIME": "process",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings"}  # fmt: skip


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def test_an_unknown_log_format_stops_a_management_command(process_env) -> None:
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, text=True,
                          env={**process_env, "WHARF_LOG_FORMAT": "xml"},
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert "WHARF_LOG_FORMAT='xml' is not a log format" in done.stderr


@pytest.mark.timeout(60)
def test_the_api_logs_json_lines(process_env, started) -> None:
    """As `make run` starts it: uvicorn's own lines and Django's, all in the format."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"],
        cwd=ROOT, env=process_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    started.append(api)
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/no-such-thing", trust_env=False)
            break
        except httpx.TransportError:
            assert api.poll() is None and time.monotonic() < deadline, "the API did not start"
            time.sleep(0.2)
    assert answer.status_code == 404
    api.send_signal(signal.SIGINT)
    out, err = api.communicate(timeout=30)
    entries = json_entries(out + err)
    loggers = {entry["logger"] for entry in entries}
    assert {"uvicorn.error", "django.request"} <= loggers, entries
    assert "uvicorn.access" not in loggers  # --no-access-log holds
    assert any(e["message"] == "Not Found: /api/v1/no-such-thing" for e in entries)


@pytest.mark.timeout(120)
def test_a_worker_and_its_beat_log_json_lines(process_env, started, tmp_path) -> None:
    """Celery keeps Wharf's handler (it would put its own format on the root logger)."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=process_env,
                   check=True, timeout=90)  # fmt: skip
    log, printed = tmp_path / "worker.log", tmp_path / "worker.out"
    with open(log, "wb") as err, open(printed, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "worker", "--node", "logs-test", "--concurrency", "1"],
            cwd=ROOT, env=process_env, stdout=out, stderr=err, start_new_session=True,
        )  # fmt: skip
    started.append(worker)
    deadline = time.monotonic() + 60
    while " ready." not in log.read_text() and worker.poll() is None:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.3)
    os.killpg(worker.pid, signal.SIGTERM)
    worker.wait(60)
    entries = json_entries(log.read_text())
    loggers = {entry["logger"] for entry in entries}
    assert "controlplane.nodes.management.commands.worker" in loggers  # the command's own
    assert {"celery.beat", "celery.apps.worker"} <= loggers, entries
    # No start-up banner among JSON lines; Celery prints its shutdown notice itself, raw.
    notices = [text for text in printed.read_text().splitlines() if text.strip()]
    assert all(text.startswith("worker: ") for text in notices), notices
