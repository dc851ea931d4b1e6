"""A new API process does its first requests' one-time work as it loads (controlplane.asgi's
`warm`), so that a burst after a restart does not wait for it: every view imported, Celery's
parts found, the spec's schema built. None of it connects, so the API still loads with the
database and Redis away (and answers 503 for them, tests/test_api_outages.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.live_api import ROOT, free_port

LOADED = """
import sys

import controlplane.asgi  # what uvicorn imports before it serves
from contracts import eas
from controlplane import intents

assert "controlplane.services.api.views" in sys.modules, "the views are not imported"
assert "controlplane.eas_api.views" in sys.modules, "EAS's views are not imported"
assert eas.spec_schema.cache_info().currsize == 1, "the spec's schema is not built"
assert intents._celery.cache_info().currsize == 1, "Celery's producer is not made"
print("warm")
"""


def test_the_api_process_loads_warm_with_the_database_and_redis_away(tmp_path):
    away = free_port()  # nothing listens there
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WHARF_HOME": str(tmp_path),
           "DATABASE_URL": f"postgresql://wharf:wharf@127.0.0.1:{away}/wharf",
           "REDIS_URL": f"redis://127.0.0.1:{away}/0"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)  # as uvicorn starts it: asgi sets its own
    loaded = subprocess.run([sys.executable, "-c", LOADED], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.strip().endswith("warm")
