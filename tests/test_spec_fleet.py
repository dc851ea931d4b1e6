"""The spec's fleet fields: rolling_strategy, health_check (readiness and liveness),
metadata.resource and metadata.termination_grace_period; their defaults, bounds, the paths
their errors name, how a rolling strategy resolves to counts, what the spec hash ignores, and
the services API accepting them end to end."""

from __future__ import annotations

import pytest

from contracts.spec import ServiceSpec, SpecError, parse_spec
from contracts.spec_fleet import RollingStrategy
from controlplane.services.models import Service
from tests.api_support import grant

STEP = "give a whole number 0..64 or a percentage from '0%' to '100%'"
BOTH_ZERO = "max_surge and max_unavailable cannot both be 0: the update could never start"
LIVENESS = {"path": "/live", "initial_delay_seconds": 30, "period_seconds": 20,
            "timeout_seconds": 5, "failure_threshold": 6}  # fmt: skip
FLEET = {
    "rolling_strategy": {"max_surge": "25%", "max_unavailable": 1},
    "health_check": {"path": "/v1/models", "initial_delay_seconds": 10, "period_seconds": 15,
                     "timeout_seconds": 15, "failure_threshold": 5, "success_threshold": 2,
                     "startup_timeout_seconds": 1800, "liveness": LIVENESS},
}  # fmt: skip


def tiny(**overrides) -> dict:
    spec = {"name": "svc", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
    spec.update(overrides)
    return spec


def errors_of(data) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(data)
    return caught.value.errors


def test_defaults_when_the_fields_are_absent():
    spec = parse_spec(tiny())
    assert spec.rolling_strategy.model_dump() == {"max_surge": 1, "max_unavailable": 0}
    assert spec.health_check.model_dump() == {
        "path": None, "initial_delay_seconds": 0, "period_seconds": 5, "timeout_seconds": 2,
        "failure_threshold": 3, "success_threshold": 1, "startup_timeout_seconds": None,
        "liveness": None,
    }  # fmt: skip
    assert (spec.metadata.resource, spec.metadata.termination_grace_period) == (None, 30)


def test_liveness_defaults():
    liveness = parse_spec(tiny(health_check={"liveness": {}})).health_check.liveness
    assert liveness.model_dump() == {"path": None, "initial_delay_seconds": 0,
                                     "period_seconds": 10, "timeout_seconds": 2,
                                     "failure_threshold": 3}  # fmt: skip


def test_every_field_set_reads_back_as_given():
    spec = parse_spec(tiny(metadata={"resource": "eas-r-gpu.a_1", "termination_grace_period": 0},
                           **FLEET))  # fmt: skip
    assert spec.model_dump(include={"rolling_strategy", "health_check"}) == FLEET
    assert (spec.metadata.resource, spec.metadata.termination_grace_period) == ("eas-r-gpu.a_1", 0)


@pytest.mark.parametrize(
    "overrides",
    [
        {"rolling_strategy": {"max_surge": 0, "max_unavailable": 1}},
        {"rolling_strategy": {"max_surge": "0%", "max_unavailable": "100%"}},
        {"rolling_strategy": {"max_surge": 64, "max_unavailable": 64}},
        {"rolling_strategy": {"max_surge": "100%"}},
        {"rolling_strategy": {"max_surge": "1%", "max_unavailable": "0%"}},
        {"rolling_strategy": {"max_unavailable": "5%"}},
        {"rolling_strategy": {}},
        {"health_check": {}},
        {"health_check": {"path": "/"}},
        {"health_check": {"path": "/v2/health/ready"}},
        {"health_check": {"path": "/a-b_c.d~e"}},
        {"health_check": {"path": None, "liveness": None}},
        {"health_check": {"period_seconds": 1, "timeout_seconds": 1}},
        {"health_check": {"period_seconds": 300, "timeout_seconds": 300}},
        {"health_check": {"initial_delay_seconds": 3600, "failure_threshold": 100,
                          "success_threshold": 100}},
        {"health_check": {"startup_timeout_seconds": 10}},
        {"health_check": {"startup_timeout_seconds": 86400}},
        {"health_check": {"liveness": {"period_seconds": 300, "timeout_seconds": 300,
                                       "initial_delay_seconds": 3600, "failure_threshold": 1}}},
        {"metadata": {"resource": "a"}},
        {"metadata": {"resource": "R" * 63}},
        {"metadata": {"termination_grace_period": 3600}},
    ],
)  # fmt: skip
def test_accepted_values(overrides):
    parse_spec(tiny(**overrides))


@pytest.mark.parametrize(
    ("overrides", "path", "message"),
    [
        ({"rolling_strategy": {"max_surge": -1}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": 65}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": "101%"}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": "1000%"}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": "25"}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": "-5%"}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": "2.5%"}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": 1.0}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": True}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_surge": None}}, "rolling_strategy.max_surge", STEP),
        ({"rolling_strategy": {"max_unavailable": "50"}}, "rolling_strategy.max_unavailable",
         STEP),
        ({"rolling_strategy": {"max_unavailable": [1]}}, "rolling_strategy.max_unavailable",
         STEP),
        ({"rolling_strategy": {"max_surge": 0}}, "rolling_strategy", BOTH_ZERO),
        ({"rolling_strategy": {"max_surge": "0%", "max_unavailable": 0}}, "rolling_strategy",
         BOTH_ZERO),
        ({"rolling_strategy": {"max_surge": 0, "max_unavailable": "0%"}}, "rolling_strategy",
         BOTH_ZERO),
        ({"rolling_strategy": {"max_surge": "000%", "max_unavailable": "0%"}},
         "rolling_strategy", BOTH_ZERO),
        ({"rolling_strategy": {"maxSurge": 1}}, "rolling_strategy.maxSurge", None),
        ({"rolling_strategy": None}, "rolling_strategy", None),
        ({"health_check": "/health"}, "health_check", None),
        ({"health_check": {"path": "health"}}, "health_check.path", None),
        ({"health_check": {"path": "/a b"}}, "health_check.path", None),
        ({"health_check": {"path": "/health?full=1"}}, "health_check.path", None),
        ({"health_check": {"path": "/health#x"}}, "health_check.path", None),
        ({"health_check": {"path": "/../etc/passwd"}}, "health_check.path",
         "a health-check path must not contain '..'"),
        ({"health_check": {"path": "/" + "a" * 256}}, "health_check.path", None),
        ({"health_check": {"path": ""}}, "health_check.path", None),
        ({"health_check": {"path": 1}}, "health_check.path", None),
        ({"health_check": {"initial_delay_seconds": -1}}, "health_check.initial_delay_seconds",
         None),
        ({"health_check": {"initial_delay_seconds": 3601}},
         "health_check.initial_delay_seconds", None),
        ({"health_check": {"period_seconds": 0}}, "health_check.period_seconds", None),
        ({"health_check": {"period_seconds": 301}}, "health_check.period_seconds", None),
        ({"health_check": {"period_seconds": "5"}}, "health_check.period_seconds", None),
        ({"health_check": {"timeout_seconds": 0}}, "health_check.timeout_seconds", None),
        ({"health_check": {"timeout_seconds": 6}}, "health_check.timeout_seconds",
         "timeout_seconds (6) cannot exceed period_seconds (5)"),
        ({"health_check": {"period_seconds": 300, "timeout_seconds": 301}},
         "health_check.timeout_seconds", None),
        ({"health_check": {"failure_threshold": 0}}, "health_check.failure_threshold", None),
        ({"health_check": {"failure_threshold": 101}}, "health_check.failure_threshold", None),
        ({"health_check": {"success_threshold": 0}}, "health_check.success_threshold", None),
        ({"health_check": {"success_threshold": 101}}, "health_check.success_threshold", None),
        ({"health_check": {"startup_timeout_seconds": 9}},
         "health_check.startup_timeout_seconds", None),
        ({"health_check": {"startup_timeout_seconds": 86401}},
         "health_check.startup_timeout_seconds", None),
        ({"health_check": {"startup_timeout_seconds": 60.0}},
         "health_check.startup_timeout_seconds", None),
        ({"health_check": {"readiness": {}}}, "health_check.readiness",
         "Wharf does not support this field (yet); remove it"),
        ({"health_check": {"liveness": "/live"}}, "health_check.liveness", None),
        ({"health_check": {"liveness": {"path": "live"}}}, "health_check.liveness.path", None),
        ({"health_check": {"liveness": {"path": "/a/../b"}}}, "health_check.liveness.path",
         None),
        ({"health_check": {"liveness": {"initial_delay_seconds": 3601}}},
         "health_check.liveness.initial_delay_seconds", None),
        ({"health_check": {"liveness": {"period_seconds": 0}}},
         "health_check.liveness.period_seconds", None),
        ({"health_check": {"liveness": {"period_seconds": 301}}},
         "health_check.liveness.period_seconds", None),
        ({"health_check": {"liveness": {"timeout_seconds": 11}}},
         "health_check.liveness.timeout_seconds",
         "timeout_seconds (11) cannot exceed period_seconds (10)"),
        ({"health_check": {"liveness": {"failure_threshold": 0}}},
         "health_check.liveness.failure_threshold", None),
        ({"health_check": {"liveness": {"success_threshold": 1}}},
         "health_check.liveness.success_threshold", None),
        ({"health_check": {"liveness": {"startup_timeout_seconds": 60}}},
         "health_check.liveness.startup_timeout_seconds", None),
        ({"metadata": {"resource": ""}}, "metadata.resource", None),
        ({"metadata": {"resource": "R" * 64}}, "metadata.resource", None),
        ({"metadata": {"resource": "-group"}}, "metadata.resource", None),
        ({"metadata": {"resource": "a b"}}, "metadata.resource", None),
        ({"metadata": {"resource": "a/b"}}, "metadata.resource", None),
        ({"metadata": {"resource": 1}}, "metadata.resource", None),
        ({"metadata": {"termination_grace_period": -1}}, "metadata.termination_grace_period",
         None),
        ({"metadata": {"termination_grace_period": 3601}}, "metadata.termination_grace_period",
         None),
        ({"metadata": {"termination_grace_period": 30.0}}, "metadata.termination_grace_period",
         None),
        ({"metadata": {"termination_grace_period": "30"}}, "metadata.termination_grace_period",
         None),
    ],
)  # fmt: skip
def test_a_bad_value_names_its_exact_path(overrides, path, message):
    errors = errors_of(tiny(**overrides))
    assert list(errors) == [path]
    if message:
        assert errors[path] == [message]


@pytest.mark.parametrize(
    ("surge", "unavailable", "replicas", "expected"),
    [
        (1, 0, 10, (1, 0)),  # the default
        (1, 0, 0, (1, 0)),  # counts are not scaled
        (3, 2, 1, (3, 2)),
        ("25%", "25%", 10, (3, 2)),  # surge rounds up, unavailable down
        ("25%", 0, 10, (3, 0)),
        (0, "25%", 10, (0, 2)),
        ("10%", "10%", 10, (1, 1)),
        ("33%", "33%", 10, (4, 3)),
        ("100%", "100%", 10, (10, 10)),
        ("1%", "1%", 10, (1, 0)),
        ("0%", "50%", 1, (1, 0)),  # both come to 0: surge 1, never less capacity
        (0, "50%", 1, (1, 0)),
        (0, "99%", 1, (1, 0)),
        (0, "50%", 2, (0, 1)),
        ("50%", "50%", 3, (2, 1)),
        ("50%", "0%", 0, (0, 0)),  # nothing to update
        (0, "100%", 0, (0, 0)),
        ("25%", 1, 64, (16, 1)),
    ],
)  # fmt: skip
def test_resolve_counts_the_way_kubernetes_does(surge, unavailable, replicas, expected):
    strategy = RollingStrategy(max_surge=surge, max_unavailable=unavailable)
    assert strategy.resolve(replicas) == expected


def test_resolve_refuses_a_negative_replica_count():
    with pytest.raises(ValueError):
        RollingStrategy().resolve(-1)


def hash_of(**overrides) -> str:
    return parse_spec(tiny(**overrides)).spec_hash()


@pytest.mark.parametrize(
    "overrides",
    [
        {"rolling_strategy": {"max_surge": "50%", "max_unavailable": 2}},
        {"health_check": {"path": "/ready", "period_seconds": 30, "timeout_seconds": 10}},
        {"health_check": {"startup_timeout_seconds": 3600, "liveness": LIVENESS}},
        {"metadata": {"termination_grace_period": 600}},
        {"metadata": {"termination_grace_period": 0, "instance": 5}, **FLEET},
    ],
)  # fmt: skip
def test_fields_applied_in_place_leave_the_spec_hash_alone(overrides):
    assert hash_of(**overrides) == hash_of()


def test_the_resource_group_is_in_the_spec_hash():
    assert hash_of(metadata={"resource": "group-a"}) != hash_of()
    assert hash_of(metadata={"resource": "group-a"}) != hash_of(metadata={"resource": "group-b"})


def test_specs_without_the_fields_keep_the_hashes_they_had_before():
    """Hashes computed before the fleet fields existed: a stored service must not restart
    because the schema grew."""
    assert hash_of() == "61fbe1847130"
    custom = {"name": "svc", "containers": [{"image": "i", "command": "c", "port": 8000}],
              "metadata": {"cpu": 2, "rpc": {"rate_limit": 5}}}  # fmt: skip
    assert parse_spec(custom).spec_hash() == "fa3b9802d942"


def test_the_json_schema_describes_the_fields_and_what_failing_each_probe_does():
    schema = ServiceSpec.model_json_schema()
    defs, props = schema["$defs"], schema["properties"]
    assert {"rolling_strategy", "health_check"} <= set(props)
    assert {"resource", "termination_grace_period"} <= set(defs["Metadata"]["properties"])
    readiness = defs["HealthCheck"]["properties"]["failure_threshold"]["description"]
    liveness = defs["Liveness"]["properties"]["failure_threshold"]["description"]
    assert "taken out of routing" in readiness and "not restarted" in readiness
    assert "restarted" in liveness and "routing" not in liveness
    assert "restarts" in defs["HealthCheck"]["properties"]["liveness"]["description"]
    assert "resource=<value>" in defs["Metadata"]["properties"]["resource"]["description"]


# The services API, end to end.


@pytest.mark.django_db
def test_the_api_accepts_the_fleet_fields_and_reads_them_back(api):
    spec = tiny(name="fleet", metadata={"instance": 2, "resource": "gpu-pool",
                                        "termination_grace_period": 120}, **FLEET)  # fmt: skip
    assert api.post("/api/v1/services/preview", spec, format="json").status_code == 200
    grant(resource_groups=["gpu-pool"])  # a node group is the operator's to hand out
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    assert api.get("/api/v1/services/fleet").json()["spec"] == spec
    stored = Service.objects.get(name="fleet").parsed_spec()
    assert stored.rolling_strategy.resolve(2) == (1, 1)
    assert stored.health_check.liveness.period_seconds == 20
    changed = {**spec, "rolling_strategy": {"max_surge": 0, "max_unavailable": 1}}
    assert api.put("/api/v1/services/fleet", changed, format="json").status_code == 200
    assert api.get("/api/v1/services/fleet").json()["spec"] == changed


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"rolling_strategy": {"max_surge": 0, "max_unavailable": "0%"}}, "rolling_strategy"),
        ({"rolling_strategy": {"max_surge": "150%"}}, "rolling_strategy.max_surge"),
        ({"health_check": {"timeout_seconds": 10}}, "health_check.timeout_seconds"),
        ({"health_check": {"liveness": {"period_seconds": 0}}},
         "health_check.liveness.period_seconds"),
        ({"metadata": {"resource": "no spaces"}}, "metadata.resource"),
        ({"metadata": {"termination_grace_period": 7200}}, "metadata.termination_grace_period"),
    ],
)  # fmt: skip
def test_the_api_refuses_a_bad_fleet_field_by_name(api, overrides, path):
    spec = tiny(name="fleet", **overrides)
    for url in ("/api/v1/services", "/api/v1/services/preview"):
        response = api.post(url, spec, format="json")
        assert response.status_code == 400, response.content
        assert path in response.json()["errors"]
    assert not Service.objects.exists()
