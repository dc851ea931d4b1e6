"""EAS's container probes (contracts.spec_probes): accepted as EAS writes them, refused naming
the field where they cannot mean anything, and mapped (workers.nodes.probes, contracts.kube.probes)
into what the node agent and the kubelet run. Pure: no servers (the probes on real processes
and containers: tests/test_probes_process.py, tests/test_probes_docker.py)."""

from __future__ import annotations

import json
import math
from dataclasses import astuple
from pathlib import Path

import pytest

from contracts.eas import normalise
from contracts.kube.probes import container_probe
from contracts.spec import SpecError, parse_spec
from contracts.spec_probes import probe_ports
from workers.nodes.probes import (
    ENGINE,
    ENGINE_READINESS,
    EXEC,
    HTTP,
    RECHECK,
    TCP,
    Probe,
    ProbeSet,
    Readiness,
    after_readiness,
    due,
    due_at,
    first_check_at,
    next_pass_in,
    probe_set,
    recheck,
    request_path,
)

CORPUS = Path(__file__).parent / "eas_corpus"


def spec(serve_port: int = 8000, top: dict | None = None, **probes) -> dict:
    return {"name": "probed", "containers": [{"image": "img", "command": "serve",
            "port": serve_port, **probes}], **(top or {})}  # fmt: skip


HTTP_CHECK = {"http_get": {"path": "/health", "port": 8000}}


@pytest.mark.parametrize("name", ["49-skill-probes-llm-fragment.json",
                                  "50-skill-probe-exec-fragment.json"])  # fmt: skip
def test_the_published_container_probe_fragments_validate_in_a_container(name):
    fragment = json.loads((CORPUS / name).read_text())
    parsed = parse_spec(normalise(spec(**fragment)))
    assert [p for p in fragment] == [
        n for n in ("startup_check", "liveness_check", "readiness_check")
        if getattr(parsed.containers[0], n) is not None
    ]  # fmt: skip


def test_eas_defaults_fill_what_a_probe_leaves_out():
    probe = parse_spec(spec(readiness_check=HTTP_CHECK)).containers[0].readiness_check
    assert probe.model_dump(exclude={"http_get", "tcp_socket", "exec"}) == {
        "initial_delay_seconds": 10, "period_seconds": 10, "timeout_seconds": 1,
        "success_threshold": 1, "failure_threshold": 3,
    }  # fmt: skip
    assert probe.http_get.scheme == "HTTP"


def test_numbers_given_as_strings_are_numbers():
    sent = spec(startup_check={"tcp_socket": {"port": "8000"}, "period_seconds": "5"})
    probe = parse_spec(normalise(sent)).containers[0].startup_check
    assert probe.tcp_socket.port == 8000 and probe.period_seconds == 5


@pytest.mark.parametrize(
    ("probes", "field", "words"),
    [
        ({"readiness_check": {"period_seconds": 5}}, "containers[0].readiness_check",
         "exactly one of http_get"),
        ({"readiness_check": {**HTTP_CHECK, "exec": {"command": ["true"]}}},
         "containers[0].readiness_check", "exactly one of http_get"),
        ({"liveness_check": {"http_get": {"path": "/h", "port": 0}}},
         "containers[0].liveness_check.http_get.port", "greater than or equal to 1"),
        ({"liveness_check": {"http_get": {"path": "/../etc", "port": 80}}},
         "containers[0].liveness_check.http_get.path", "'..'"),
        ({"liveness_check": {"http_get": {"path": "/h?x=1", "port": 80}}},
         "containers[0].liveness_check.http_get.path", "should match pattern"),
        ({"liveness_check": {"http_get": {"path": "/h", "port": 80, "scheme": "HTTPS"}}},
         "containers[0].liveness_check.http_get.scheme", "'HTTP'"),
        ({"liveness_check": {"http_get": {"path": "/h", "port": 80, "host": "10.0.0.1"}}},
         "containers[0].liveness_check.http_get.host", "does not support this field"),
        ({"readiness_check": {"exec": {"command": []}}},
         "containers[0].readiness_check.exec.command", "at least 1 item"),
        ({"readiness_check": {"exec": {"command": "test -f /tmp/ready"}}},
         "containers[0].readiness_check.exec.command", "valid list"),
        ({"readiness_check": {**HTTP_CHECK, "period_seconds": 2, "timeout_seconds": 5}},
         "containers[0].readiness_check.timeout_seconds", "cannot exceed period_seconds"),
        ({"readiness_check": {**HTTP_CHECK, "failure_threshold": 101}},
         "containers[0].readiness_check.failure_threshold", "less than or equal to 100"),
        ({"startup_check": {**HTTP_CHECK, "success_threshold": 2}},
         "containers[0]", "startup_check.success_threshold must be 1"),
        ({"readiness_check": HTTP_CHECK, "health_check": HTTP_CHECK},
         "containers[0]", "same probe"),
    ],
)  # fmt: skip
def test_a_probe_that_cannot_mean_anything_is_refused_naming_its_field(probes, field, words):
    with pytest.raises(SpecError) as refused:
        parse_spec(spec(**probes))
    assert field in refused.value.errors, refused.value.errors
    assert words in " ".join(refused.value.errors[field])


def test_wharfs_health_check_and_container_probes_together_are_refused_naming_both():
    with pytest.raises(SpecError) as refused:
        parse_spec(spec(top={"health_check": {"path": "/h"}}, liveness_check=HTTP_CHECK))
    assert {"health_check", "containers[0].liveness_check"} <= set(refused.value.errors)
    assert "give one of them" in refused.value.errors["health_check"][0]


def test_unset_probes_keep_the_hash_and_set_ones_change_it():
    plain = parse_spec(spec()).spec_hash()
    assert parse_spec(spec(readiness_check=None)).spec_hash() == plain
    assert parse_spec(spec(readiness_check=HTTP_CHECK)).spec_hash() != plain


TIMING = {"initial_delay_seconds": 4, "period_seconds": 3, "timeout_seconds": 2,
          "failure_threshold": 5}  # fmt: skip


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        ({}, ProbeSet(readiness=ENGINE_READINESS)),  # Wharf's defaults: the engine's own check
        ({"readiness_check": {**HTTP_CHECK, **TIMING, "success_threshold": 2}},
         ProbeSet(readiness=Probe("/health", 4, 3, 2, 5, 2, HTTP, 8000))),
        ({"health_check": {"tcp_socket": {"port": 9000}, **TIMING}},  # EAS's older spelling
         ProbeSet(readiness=Probe(None, 4, 3, 2, 5, 1, TCP, 9000))),
        ({"liveness_check": {"exec": {"command": ["/bin/check", "-q"]}, **TIMING}},
         ProbeSet(readiness=ENGINE_READINESS, liveness=Probe(None, 4, 3, 2, 5, 1, EXEC, None,
                                                    ("/bin/check", "-q")))),
        ({"startup_check": {**HTTP_CHECK, **TIMING}},  # deadline: 4 + 3 * 5
         ProbeSet(readiness=ENGINE_READINESS, startup=Probe("/health", 4, 3, 2, 5, 1, HTTP, 8000),
                  startup_deadline=19.0)),
    ],
)  # fmt: skip
def test_container_probes_map_to_what_the_agent_runs(probes, expected):
    assert probe_set(parse_spec(spec(**probes))) == expected


def test_wharfs_health_check_maps_as_before():
    check = {"path": "/ready", "startup_timeout_seconds": 60, "liveness": {"path": "/live"}}
    found = probe_set(parse_spec(spec(top={"health_check": check})))
    assert found.readiness.path == "/ready" and found.readiness.kind == ENGINE
    assert found.liveness.path == "/live" and found.startup is None
    assert found.startup_deadline == 60


@pytest.mark.parametrize(
    ("probe", "fronted", "path"),
    [
        (Probe("/health", kind=HTTP, port=8000, timeout=2), True,
         "/.wharf/probe?port=8000&timeout=2&path=%2Fhealth"),
        (Probe(kind=TCP, port=9000, timeout=1), True, "/.wharf/probe?port=9000&timeout=1"),
        (Probe("/health", kind=HTTP, port=8000), False, "/health"),  # its served port
        (Probe(kind=TCP, port=8000), False, ""),  # a connect to its served port
        (Probe("/health"), True, None),  # the engine's own check: as before
        (Probe(kind=EXEC, command=("true",)), True, None),
    ],
)  # fmt: skip
def test_network_probes_go_through_the_front(probe, fronted, path):
    assert request_path(probe, fronted) == path


@pytest.mark.parametrize(
    ("probes", "served", "engine_port", "ports"),
    [
        ({}, 8000, 8000, {}),
        ({"readiness_check": HTTP_CHECK}, 8000, 8000, {8000: 8000}),
        ({"readiness_check": HTTP_CHECK}, 8000, 41234, {8000: 41234}),  # a local process's
        ({"liveness_check": {"tcp_socket": {"port": 9000}}, "startup_check": HTTP_CHECK},
         8000, 41234, {9000: 9000, 8000: 41234}),
        ({"readiness_check": {"exec": {"command": ["true"]}}}, 8000, 8000, {}),
    ],
)  # fmt: skip
def test_the_front_is_told_only_the_ports_the_probes_name(probes, served, engine_port, ports):
    container = parse_spec(spec(served, **probes)).containers[0]
    assert probe_ports(container, served, engine_port) == ports


@pytest.mark.parametrize(
    ("probe", "action"),
    [
        (HTTP_CHECK, {"httpGet": {"path": "/health", "port": "engine"}}),
        ({"http_get": {"path": "/m", "port": 9000}}, {"httpGet": {"path": "/m", "port": 9000}}),
        ({"tcp_socket": {"port": 8000}}, {"tcpSocket": {"port": "engine"}}),
        ({"exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]}},
         {"exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]}}),
    ],
)  # fmt: skip
def test_on_kubernetes_each_probe_is_the_kubelets(probe, action):
    parsed = parse_spec(spec(readiness_check={**probe, **TIMING})).containers[0]
    assert container_probe(parsed.readiness_check, 8000) == {
        **action, "initialDelaySeconds": 4, "periodSeconds": 3, "timeoutSeconds": 2,
        "failureThreshold": 5, "successThreshold": 1,
    }  # fmt: skip


def test_a_pods_engine_gets_the_containers_probes_and_validates_on_kubernetes():
    from tests.kube_manifest_support import VERSIONS, engine, objects

    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    startup = {"tcp_socket": {"port": 8000}, **TIMING}
    exec_check = {"exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]}}
    objs = objects(spec(startup_check=startup, liveness_check=exec_check))
    container = engine(objs)
    assert container["startupProbe"]["tcpSocket"] == {"port": "engine"}
    assert container["livenessProbe"]["exec"] == exec_check["exec"]
    # No readiness probe of the container's: the engine's own (a custom one's: its port).
    assert container["readinessProbe"] == {"tcpSocket": {"port": "engine"}, "periodSeconds": 5}
    for obj in objs:
        kubernetes_validate.validate(obj, VERSIONS[0], strict=True)


@pytest.mark.django_db
def test_the_api_answers_both_health_checks_with_a_400_naming_both(api):
    sent = spec(top={"health_check": {}}, readiness_check=HTTP_CHECK)
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 400
    assert {"health_check", "containers[0].readiness_check"} <= set(answer.json()["errors"])


@pytest.mark.parametrize(
    ("probe", "last", "starting", "expected"),
    [
        (ENGINE_READINESS, None, True, True),  # never probed
        (ENGINE_READINESS, 98.8, True, True),  # starting: every second
        (ENGINE_READINESS, 99.5, True, False),
        (ENGINE_READINESS, 98.8, False, False),  # ready: every 5 s
        (ENGINE_READINESS, 95.0, False, True),
        (Probe(period=5), 98.8, True, False),  # a period the spec gives holds while starting
        (Probe(initial_delay=30), None, True, False),  # within its initial delay (started at 80)
    ],
)  # fmt: skip
def test_a_new_instance_is_checked_every_second_until_it_passes_unless_its_spec_says(
    probe, last, starting, expected
):
    assert due(last, 80.0, 100.0, probe, starting) is expected


@pytest.mark.parametrize(
    ("probe", "last", "starting", "expected"),
    [
        (ENGINE_READINESS, None, True, 80.0),  # never probed: at once
        (ENGINE_READINESS, 98.8, True, 99.8),  # starting: a second after the last
        (ENGINE_READINESS, 98.8, False, 103.8),  # ready: five seconds after
        (Probe(period=5), 98.8, True, 103.8),  # a period the spec gives holds while starting
        (Probe(initial_delay=30), None, True, 110.0),  # after its initial delay
        (Probe(initial_delay=30, starting_period=1.0), 95.0, True, 110.0),
    ],
)  # fmt: skip
def test_when_a_check_falls_due(probe, last, starting, expected):
    assert due_at(last, 80.0, probe, starting) == pytest.approx(expected)
    assert due(last, 80.0, expected, probe, starting)
    assert not due(last, 80.0, expected - 0.01, probe, starting)


@pytest.mark.parametrize(
    ("clock", "now", "expected"),
    [
        ({}, 100.0, 2.0),  # nothing starting: the agent's interval
        ({RECHECK: 100.5}, 100.0, 0.5),  # a starting instance's check falls due sooner
        ({RECHECK: 105.0}, 100.0, 2.0),  # later than the interval: the interval
        ({RECHECK: 99.0}, 100.0, 0.0),  # already due: at once
    ],
)  # fmt: skip
def test_an_agent_comes_back_for_a_starting_instance_before_its_interval(clock, now, expected):
    assert next_pass_in(clock, now, 2.0) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("health_check", "expected"),
    [
        (None, 101.0),  # the engine's own check: a second after the start
        # a check the spec gives keeps its own timing: the agent's interval
        ({"period_seconds": 10}, math.inf),
        ({"initial_delay_seconds": 30}, math.inf),
    ],
)  # fmt: skip
def test_an_engine_just_started_is_first_checked_a_starting_period_on(health_check, expected):
    spec = {"name": "svc", "containers": [{"image": "none", "port": 8000}]}
    if health_check is not None:
        spec["health_check"] = health_check
    assert first_check_at(parse_spec(spec), 100.0) == expected


def test_the_soonest_recheck_is_kept():
    clock: dict = {}
    recheck(clock, [])
    assert RECHECK not in clock
    recheck(clock, [105.0, 103.0])
    recheck(clock, [104.0, math.inf])
    assert clock[RECHECK] == 103.0


@pytest.mark.parametrize(
    ("state", "passed", "counts", "expected"),
    [
        ("starting", True, (0, 2), ("ready", 1, 0, "InstanceReady")),
        ("ready", True, (1, 0), ("ready", 1, 0, "")),  # unchanged: the agent writes nothing
        ("ready", False, (1, 0), ("ready", 0, 1, "")),
        ("ready", False, (0, 2), ("unhealthy", 0, 3, "InstanceUnhealthy")),
        ("unhealthy", False, (0, 3), ("unhealthy", 0, 3, "")),  # stops at the threshold
        ("unhealthy", True, (0, 3), ("ready", 1, 0, "InstanceReady")),
        ("starting", False, (0, 3), ("starting", 0, 3, "")),
    ],
)  # fmt: skip
def test_readiness_counts_stop_at_their_thresholds(state, passed, counts, expected):
    current = Readiness(state, *counts)
    assert astuple(after_readiness(current, passed, Probe())) == expected
