"""The spec's autoscaler (EAS's shape) and routing policy: what is accepted, what is refused
and where, and that neither shapes an instance."""

import pytest

from contracts import spec_facts
from contracts.spec import SpecError, parse_spec

QPS = [{"metricName": "qps", "threshold": 10}]


def tiny(engine: str = "vllm-cpu", **overrides) -> dict:
    spec = {"name": "svc", "llm": {"engine": engine, "model": "tiny-llama"}}
    if engine not in ("vllm-cpu", "custom"):
        spec["metadata"] = {"gpu": 1}
    spec.update(overrides)
    return spec


def pd(**roles) -> dict:
    return {"engine": "vllm-cpu", "model": "tiny-llama",
            "pd": {"prefill": roles.get("prefill", {}), "decode": roles.get("decode", {}),
                   **roles.get("extra", {})}}  # fmt: skip


def errors_of(data) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(data)
    return caught.value.errors


def test_the_eas_shape_with_its_defaults():
    spec = parse_spec(tiny(autoscaler={"min": 1, "max": 8, "scaleStrategies": QPS}))
    scaler = spec.autoscaler
    assert (scaler.min, scaler.max, scaler.scaleStrategies[0].threshold) == (1, 8, 10.0)
    assert scaler.behavior.scaleUp.stabilizationWindowSeconds == 0
    assert scaler.behavior.scaleDown.stabilizationWindowSeconds == 300
    assert scaler.behavior.onZero.scaleDownGracePeriodSeconds == 600
    assert spec_facts.autoscalers(spec) == {"": ("autoscaler", scaler)}


@pytest.mark.parametrize(
    ("autoscaler", "extra", "field", "words"),
    [
        ({"min": 3, "max": 2, "scaleStrategies": QPS}, {}, "autoscaler", "min 3 is above max 2"),
        ({"min": 2, "max": 4, "scaleStrategies": QPS}, {}, "metadata.instance",
         "starting with 1 is outside the autoscaler's 2..4"),
        ({"min": 0, "max": 4, "scaleStrategies": []}, {}, "autoscaler.scaleStrategies",
         "at least 1"),
        ({"min": 0, "max": 4, "scaleStrategies": QPS * 2}, {}, "autoscaler",
         "each metricName once"),
        ({"min": 0, "max": 4, "scaleStrategies": [{"metricName": "memory", "threshold": 1}]}, {},
         "autoscaler.scaleStrategies[0].metricName", "'qps', 'concurrency', 'queue'"),
        ({"min": 0, "max": 4, "scaleStrategies": [{"metricName": "kv_cache", "threshold": 120}]},
         {}, "autoscaler.scaleStrategies[0]", "a percentage: at most 100"),
        ({"min": 0, "max": 4, "scaleStrategies": [{"metricName": "qps", "threshold": 0}]}, {},
         "autoscaler.scaleStrategies[0].threshold", "greater than 0"),
        ({"min": 0, "max": 4, "scaleStrategies": [{"metricName": "qps", "threshold": "5"}]}, {},
         "autoscaler.scaleStrategies[0].threshold", "valid number"),
        ({"min": 0, "max": 4, "scaleStrategies": QPS, "service": "other"}, {},
         "autoscaler.service", "does not support this field"),
        ({"min": 0, "max": 4, "scaleStrategies": QPS,
          "behavior": {"scaleDown": {"stabilizationWindowSeconds": -1}}}, {},
         "autoscaler.behavior.scaleDown.stabilizationWindowSeconds", "greater than or equal"),
        ({"min": 0, "max": 65, "scaleStrategies": QPS}, {}, "autoscaler.max", "less than"),
    ],
)  # fmt: skip
def test_a_bad_autoscaler_is_refused_naming_the_field(autoscaler, extra, field, words):
    errors = errors_of(tiny(autoscaler=autoscaler, **extra))
    assert field in errors, errors
    assert any(words in message for message in errors[field]), errors


@pytest.mark.parametrize("metric", ["queue", "kv_cache"])
def test_engine_signals_need_an_engine_whose_metrics_wharf_reads(metric):
    scaler = {"min": 1, "max": 2, "scaleStrategies": [{"metricName": metric, "threshold": 5}]}
    errors = errors_of(tiny("tgi", autoscaler=scaler))
    assert (
        "engine tgi has none Wharf reads" in errors["autoscaler.scaleStrategies[0].metricName"][0]
    )
    assert parse_spec(tiny("vllm", autoscaler=scaler)).autoscaler is not None


def test_prefill_and_decode_scale_each_on_their_own_autoscaler_or_the_services():
    own = {"min": 1, "max": 3, "scaleStrategies": [{"metricName": "queue", "threshold": 2}]}
    spec = parse_spec(tiny(llm=pd(decode={"autoscaler": own}),
                           autoscaler={"min": 1, "max": 2, "scaleStrategies": QPS}))  # fmt: skip
    found = spec_facts.autoscalers(spec)
    assert found["prefill"][0] == "autoscaler" and found["prefill"][1].max == 2
    assert found["decode"][0] == "llm.pd.decode.autoscaler" and found["decode"][1].max == 3
    errors = errors_of(tiny(llm=pd(decode={"instance": 5, "autoscaler": own})))
    assert (
        "outside the autoscaler's 1..3 (llm.pd.decode.autoscaler)"
        in errors["llm.pd.decode.instance"][0]
    )


def test_neither_autoscaler_nor_routing_shapes_an_instance():
    plain = parse_spec(tiny()).spec_hash()
    scaled = tiny(autoscaler={"min": 0, "max": 3, "scaleStrategies": QPS},
                  metadata={"rpc": {"routing": "session", "session_header": "x-user"}})  # fmt: skip
    assert parse_spec(scaled).spec_hash() == plain
    with_rate = parse_spec(tiny(metadata={"rpc": {"rate_limit": 5}})).spec_hash()
    assert parse_spec(tiny(metadata={"rpc": {"rate_limit": 5, "routing": "prefix_cache"}})
                      ).spec_hash() == with_rate  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "policy"),
    [
        (tiny(), "least_outstanding"),
        (tiny(metadata={"rpc": {"routing": "prefix_cache"}}), "prefix_cache"),
        (tiny(llm=pd(extra={"router": {"prefill_policy": "kv_cache_load"}})), "kv_cache_load"),
        (tiny(llm=pd(), metadata={"rpc": {"routing": "session"}}), "session"),
    ],
)
def test_the_routing_policy_is_the_rpc_one_else_the_prefill_legs(spec, policy):
    assert spec_facts.routing_policy(parse_spec(spec)) == policy


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (tiny(metadata={"rpc": {"routing": "random"}}), "metadata.rpc.routing", "'prefix_cache'"),
        (tiny(metadata={"rpc": {"session_header": "x-user"}}), "metadata.rpc.session_header",
         "read by routing session"),
        (tiny(metadata={"rpc": {"routing": "session", "session_header": "x user"}}),
         "metadata.rpc.session_header", "should match pattern"),
        (tiny("tgi", metadata={"gpu": 1, "rpc": {"routing": "kv_cache_load"}}),
         "metadata.rpc.routing", "engine tgi has none Wharf reads"),
        (tiny(llm=pd(extra={"router": {"prefill_policy": "session"}}),
              metadata={"rpc": {"routing": "prefix_cache"}}), "metadata.rpc.routing",
         "given twice, differently"),
    ],
)  # fmt: skip
def test_a_bad_routing_policy_is_refused_naming_the_field(spec, field, words):
    errors = errors_of(spec)
    assert any(words in message for message in errors.get(field, [])), errors
