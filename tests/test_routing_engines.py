"""The routing snapshot names each service's engine, which decides the routes the gateway's EAS
form reaches (contracts.engine_routes)."""

import pytest

from contracts.routing import Snapshot
from controlplane.services.models import Service
from controlplane.services.routing import build_snapshot
from tests.api_support import default_workspace

pytestmark = pytest.mark.django_db

_COMMAND = {"image": "example/server:1", "command": "python -m server", "port": 8000}


@pytest.mark.parametrize(
    ("spec", "engine"),
    [
        ({"llm": {"engine": "vllm-cpu", "model": "tiny"}}, "vllm-cpu"),
        ({"llm": {"engine": "tgi", "model": "tiny"}}, "tgi"),
        ({"containers": [_COMMAND]}, "custom"),
        # A given command runs verbatim, whatever llm.engine says: Wharf cannot know its API.
        ({"llm": {"engine": "vllm", "model": "tiny"}, "containers": [_COMMAND]}, "custom"),
    ],
    ids=["vllm-cpu", "tgi", "command", "command-with-llm"],
)
def test_the_snapshot_names_each_services_engine(spec: dict, engine: str) -> None:
    Service.objects.create(workspace=default_workspace(), name="svc", spec={"name": "svc", **spec})
    snapshot = build_snapshot()
    assert snapshot.services["svc"].engine == engine
    assert Snapshot.from_json(snapshot.to_json()).services["svc"].engine == engine


def test_a_snapshot_without_engines_reads_as_engines_unknown() -> None:
    old = '{"version": 1, "services": {"svc": {"instances": []}}, "keys": {}}'
    assert Snapshot.from_json(old).services["svc"].engine == ""
