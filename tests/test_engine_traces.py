"""Engines joined to the platform's traces: vLLM's --otlp-traces-endpoint rendered when the
platform has a collector (Placement.otlp_endpoint), on nodes and in pods, never otherwise."""

from __future__ import annotations

import pytest

from contracts.engines import Placement, render
from contracts.kube.manifests import Owner
from contracts.kube.manifests import render as render_objects
from contracts.kube.names import KubeSettings
from contracts.spec import ServiceSpec, parse_spec
from contracts.spec_facts import replicas

COLLECTOR = "http://otel-collector:4318"
FLAG = "--otlp-traces-endpoint"


def spec(engine: str, env: dict[str, str] | None = None, **llm) -> ServiceSpec:
    kind = "npu" if engine == "vllm-ascend" else "gpu"
    data: dict = {"name": "chat", "llm": {"engine": engine, "model": "m", **llm}}
    if engine != "vllm-cpu":
        data["metadata"] = {kind: 1}
    if env:
        data["containers"] = [{"env": [{"name": k, "value": v} for k, v in env.items()]}]
    return parse_spec(data)


def flags(args: list[str]) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == FLAG]


@pytest.mark.parametrize("engine", ["vllm", "vllm-cpu", "vllm-ascend"])
@pytest.mark.parametrize(
    ("endpoint", "rendered"),
    [("", []), (COLLECTOR, [COLLECTOR + "/v1/traces"]), (COLLECTOR + "/v1/traces/",
     [COLLECTOR + "/v1/traces"])],
)  # fmt: skip
def test_vllm_engines_trace_to_the_platform_s_collector(
    engine: str, endpoint: str, rendered: list[str]
) -> None:
    plan = render(spec(engine), Placement(devices=(0,), otlp_endpoint=endpoint))
    assert flags(plan.args) == rendered
    protocol = plan.env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    assert protocol == ("http/protobuf" if endpoint else None)
    assert plan.env.get("OTEL_SERVICE_NAME") == ("chat" if endpoint else None)


@pytest.mark.parametrize(
    "llm",
    [
        {"options": {FLAG: "http://own:4318/v1/traces"}},
        {"extra_args": [FLAG, "http://own:4318/v1/traces"]},
        {"extra_args": [f"{FLAG}=http://own:4318/v1/traces"]},
    ],
)
def test_a_flag_of_the_user_s_own_wins(llm: dict) -> None:
    plan = render(spec("vllm", **llm), Placement(devices=(0,), otlp_endpoint=COLLECTOR))
    assert COLLECTOR + "/v1/traces" not in plan.args
    assert " ".join(plan.args).count(FLAG) == 1


def test_the_spec_s_env_may_rename_the_engine_s_spans() -> None:
    plan = render(spec("vllm", env={"OTEL_SERVICE_NAME": "mine"}),
                  Placement(devices=(0,), otlp_endpoint=COLLECTOR))  # fmt: skip
    assert plan.env["OTEL_SERVICE_NAME"] == "mine"


def test_other_engines_are_not_given_the_flag() -> None:
    plan = render(spec("sglang"), Placement(devices=(0,), otlp_endpoint=COLLECTOR))
    assert FLAG not in plan.args


@pytest.mark.parametrize(("endpoint", "count"), [("", 0), (COLLECTOR, 1)])
def test_pods_trace_where_the_cluster_settings_name_a_collector(endpoint: str, count: int) -> None:
    chat = spec("vllm")
    counts = replicas(chat)
    settings = KubeSettings(namespace="llm", model_store_claim="models", otlp_endpoint=endpoint)
    objects = render_objects(chat.name, chat, 1, counts, settings,
                             Owner("chat", "6f1c8a54-0000-4000-8000-000000000001"),
                             {role: "engine-key-0123456789" for role in counts})  # fmt: skip
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"].count(FLAG) + container.get("command", []).count(FLAG) == count
