"""The API's ASGI application (uvicorn: `python -m controlplane`, `make run`).

Django runs each request's code on a thread of its own and keeps a database connection per
thread, so on PostgreSQL every request opened a session of its own (about 10 ms of its time,
and a server process forked for it). This process's requests share a pool of
WHARF_API_DB_POOL connections instead. Only the API pools: the workers' threads live long and
keep theirs.

Django imports the URLconf, and with it every view, at the first request it serves; Celery
finds its parts when the API first asks the workers for a pass, and the spec's schema is
built at the first spec read. A new process's first requests took about a second more for
it, and those that came beside them waited too. `warm` does all three as this module loads,
before uvicorn serves anything; none of them connects to anything."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.urls import get_resolver


def pooled(database: dict, size: int, wait: float) -> None:
    """Make `database` (a DATABASES entry) take its connections from a pool of at most `size`,
    in place, before its first connection: Django's own pooling (psycopg_pool), each connection
    checked before it is handed out, a request waiting at most `wait` seconds for one. Nothing
    for SQLite or size 0."""
    if size and database["ENGINE"] == "django.db.backends.postgresql":
        database["CONN_MAX_AGE"] = 0  # a pooled connection goes back at the request's end
        database.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": size, "timeout": wait,
        }  # fmt: skip


def warm() -> None:
    """Do now what the first requests would otherwise do."""
    from contracts import eas
    from controlplane import intents

    get_resolver().url_patterns  # noqa: B018 (the property imports every view)
    intents.warm()
    eas.spec_schema()


os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
application = get_asgi_application()
warm()
pooled(settings.DATABASES["default"], settings.WHARF_API_DB_POOL, settings.WHARF_API_DB_POOL_WAIT_S)
