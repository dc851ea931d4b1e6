"""One log format for every Wharf process: the API, the workers and beat, the gateway, `make run`.

Each line has a UTC timestamp with milliseconds, the level, the logger and the message, and
the request's id when one is being served (REQUEST_ID, set by the gateway per request):

    2026-11-24T10:15:02.371Z INFO gateway.relay.proxy: instance a failed request_id=4f0c...

or, with WHARF_LOG_FORMAT=json, one JSON object per line:

    {"timestamp": "2026-11-24T10:15:02.371Z", "level": "INFO", "logger": "gateway.relay.proxy",
     "message": "instance a failed", "request_id": "4f0c..."}

`logging_config()` is the dictConfig every process applies (Django's LOGGING, uvicorn's
log_config). Third-party loggers that install handlers of their own (uvicorn's, Django's,
Celery's task logger) are given this one instead. Tokens and URL passwords are masked in
every line as a last line of defence (the code must not log them in the first place), and
access-log lines carry paths without their query strings, where a caller may have put a key.

Standard library only, and no Django: every plane imports it.
"""

from __future__ import annotations

import json
import logging
import logging.config
import os
import re
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

FORMAT_VARIABLE = "WHARF_LOG_FORMAT"
LEVEL_VARIABLE = "WHARF_LOG_LEVEL"
FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# The id of the request being served in this context (an asyncio task per request in the
# gateway), added to every line logged meanwhile.
REQUEST_ID: ContextVar[str | None] = ContextVar("wharf_request_id", default=None)

# Wharf's own tokens (contracts.tokens: service, API token, API key), bearer credentials,
# and the password in a URL (redis://:password@host).
_SECRET = re.compile(
    r"\b(?P<kind>wsk|wat|wak)-[A-Za-z0-9_\-]{6,}"
    r"|(?i:\bbearer\s+)[^\s\"',;]{6,}"
    r"|(?P<user>://[^:/@\s]*):[^@/\s]+@"
)
# Loggers that come with handlers (and formats) of their own, routed to ours instead.
_OWN_HANDLER = ("uvicorn", "uvicorn.access", "celery.task")
_PROPAGATING = ("uvicorn.error", "uvicorn.asgi", "django", "django.server")
ACCESS_LOGGER = "uvicorn.access"


class LogConfigError(ValueError):
    """WHARF_LOG_FORMAT or WHARF_LOG_LEVEL has a value no process can start with."""


def log_format(environ: Mapping[str, str] | None = None) -> str:
    """`text` (the default) or `json`, from WHARF_LOG_FORMAT."""
    value = (os.environ if environ is None else environ).get(FORMAT_VARIABLE, "").strip()
    if not value:
        return "text"
    if value.lower() not in FORMATS:
        raise LogConfigError(
            f"{FORMAT_VARIABLE}={value!r} is not a log format; use 'text' (the default) or "
            "'json' (one JSON object per line)."
        )
    return value.lower()


def log_level(environ: Mapping[str, str] | None = None) -> str:
    """The level name from WHARF_LOG_LEVEL (any case), by default INFO."""
    value = (os.environ if environ is None else environ).get(LEVEL_VARIABLE, "").strip()
    if not value:
        return "INFO"
    if value.upper() not in LEVELS:
        raise LogConfigError(
            f"{LEVEL_VARIABLE}={value!r} is not a log level; use one of {', '.join(LEVELS)}."
        )
    return value.upper()


def masked(text: str) -> str:
    """`text` with Wharf tokens, bearer credentials and URL passwords replaced by ******."""
    return _SECRET.sub(_mask, text)


def _mask(match: re.Match[str]) -> str:
    kind, user = match.group("kind"), match.group("user")
    if kind:
        return f"{kind}-******"
    return f"{user}:******@" if user else "Bearer ******"


def timestamp(created: float) -> str:
    """ISO 8601 in UTC with milliseconds: 2026-11-24T10:15:02.371Z."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _request_id(record: logging.LogRecord) -> str | None:
    return getattr(record, "request_id", None) or REQUEST_ID.get()


class TextFormatter(logging.Formatter):
    """`<timestamp> <LEVEL> <logger>: <message>[ request_id=<id>]`, a traceback below."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{timestamp(record.created)} {record.levelname} {record.name}: "
        line += record.getMessage()
        request_id = _request_id(record)
        if request_id:
            line += f" request_id={request_id}"
        details = _details(self, record)
        if details:
            line += "\n" + details
        return masked(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, and request_id,
    exception (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": masked(record.getMessage()),
        }
        request_id = _request_id(record)
        if request_id:
            entry["request_id"] = request_id
        details = _details(self, record)
        if details:
            entry["exception"] = masked(details)
        # ASCII only: a line separator inside a message cannot split the object.
        return json.dumps(entry, default=str)


def _details(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback and stack, as logging.Formatter would add them."""
    parts = []
    if record.exc_info and not record.exc_text:
        record.exc_text = formatter.formatException(record.exc_info)
    if record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return "\n".join(parts)


class AccessQueryRedaction(logging.Filter):
    """uvicorn's access lines without the query string: `/v1/models?key=…` logs `/v1/models`.

    uvicorn logs (client, method, path with query, HTTP version, status) as the record's args.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path, _, _query = args[2].partition("?")
            record.args = (args[0], args[1], path, args[3], args[4])
        return True


def formatter(kind: str) -> logging.Formatter:
    """The formatter for `kind`, text or json."""
    return JsonFormatter() if kind == "json" else TextFormatter()


def logging_config(
    kind: str, level: str, *, access_log: bool = True, stream: str = "ext://sys.stderr"
) -> dict[str, Any]:
    """The dictConfig for a Wharf process: one handler on `stream`, lines of `kind` (log_format).

    uvicorn logs access lines whenever its access logger has a handler; `access_log=False`
    leaves it none, for a process that configures logging after uvicorn did (Django's).
    """
    handler = ["wharf"]
    loggers: dict[str, dict[str, Any]] = {
        name: {"handlers": handler, "level": level, "propagate": False} for name in _OWN_HANDLER
    }
    loggers.update({name: {"handlers": [], "propagate": True} for name in _PROPAGATING})
    loggers[ACCESS_LOGGER]["filters"] = ["access_query"]
    if not access_log:
        loggers[ACCESS_LOGGER]["handlers"] = []
    # One line per request from these clients would drown everything else.
    loggers.update(
        {name: {"level": "WARNING"} for name in ("httpx", "httpcore", "httpx2", "httpcore2")}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"wharf": {"()": formatter, "kind": kind}},
        "filters": {"access_query": {"()": AccessQueryRedaction}},
        "handlers": {
            "wharf": {"class": "logging.StreamHandler", "formatter": "wharf", "stream": stream}
        },
        "root": {"handlers": handler, "level": level},
        "loggers": loggers,
    }


def apply(config: dict[str, Any]) -> None:
    """Configure this process's logging from `config`, Python's warnings included (they are
    otherwise printed as they are, outside the format); Django's LOGGING_CONFIG."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)


def line(level: int, logger: str, message: str, environ: Mapping[str, str] | None = None) -> str:
    """One line in the environment's format, for a process that writes a log file itself."""
    record = logging.LogRecord(logger, level, __file__, 0, message, None, None)
    return formatter(log_format(environ)).format(record)
