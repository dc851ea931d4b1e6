"""A worker's thread keeps its PostgreSQL session from one task to the next (Celery's Django
fixup closed it around every task: at 500 nodes a burst's passes spent more time connecting
than querying), and a session the database dropped meanwhile is replaced before the next
task's first query, not failed on."""

from __future__ import annotations

import psycopg
import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from workers.celery import _kept_sessions, app
from workers.tasks import reconcile_service

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's sessions"),
]
TASK = reconcile_service


def backend() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def around_a_task() -> None:
    """What a worker does before and after each task: the fixup's signals, then ours."""
    fixup = DjangoWorkerFixup(app)
    fixup.on_task_prerun(TASK)
    _kept_sessions(sender=TASK)
    fixup.on_task_postrun(TASK)
    _kept_sessions(sender=TASK)


def test_the_session_outlives_the_task():
    first = backend()
    for _ in range(3):
        around_a_task()
    assert backend() == first


def test_a_session_the_database_ended_is_replaced_before_the_next_query():
    first = backend()
    settings = connection.settings_dict
    with psycopg.connect(host=settings["HOST"], port=settings["PORT"] or 5432,
                         user=settings["USER"], password=settings["PASSWORD"],
                         dbname=settings["NAME"], autocommit=True) as other:  # fmt: skip
        other.execute("SELECT pg_terminate_backend(%s)", [first])
    around_a_task()
    assert backend() != first  # a new session, and no error
