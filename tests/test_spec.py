import json
import re
from pathlib import Path

import pytest

from contracts.spec import SpecError, parse_spec

ROOT = Path(__file__).parent.parent
SPECS = sorted((ROOT / "deploy_specs").glob("*.json"))


def errors_of(data) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(data)
    return caught.value.errors


def tiny(**overrides):
    spec = {"name": "svc", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
    spec.update(overrides)
    return spec


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_deploy_spec_validates(path):
    spec = parse_spec(json.loads(path.read_text()))
    assert spec.name


def test_every_spec_file_a_readme_names_exists():
    """A newcomer copies these paths from the READMEs: each must be a file of deploy_specs/."""
    readmes = [ROOT / "README.md", *ROOT.glob("*/README.md")]
    spec_file = re.compile(r"deploy_specs/[\w.-]+\.json")
    named = {name for path in readmes for name in spec_file.findall(path.read_text())}
    assert named, "the README names no spec file"
    assert sorted(name for name in named if not (ROOT / name).is_file()) == []


def test_eas_bladellm_seed_example_validates():
    spec = parse_spec(json.loads((SPECS[0].parent / "eas-bladellm-bloom.json").read_text()))
    assert spec.storage[0].oss.path == "oss://examplebucket/bloom_7b/"


@pytest.mark.parametrize(
    ("section", "field"),
    [(None, "clouds"), ("metadata", "enable_web_service"), ("containers", "prepared"),
     ("llm", "temperature")],
)  # fmt: skip
def test_a_field_wharf_does_not_act_on_is_refused_by_name(section, field):
    spec = tiny(containers=[{"port": 8000}])
    if section == "containers":
        spec["containers"][0][field] = {"x": 1}
        path = f"containers[0].{field}"
    elif section:
        spec.setdefault(section, {})[field] = "x"
        path = f"{section}.{field}"
    else:
        spec[field] = {"max_surge": 1}
        path = field
    assert errors_of(spec) == {path: ["Wharf does not support this field (yet); remove it"]}


def test_rejects_missing_image():
    errors = errors_of({"name": "svc", "containers": [{"command": "serve", "port": 8000}]})
    assert "containers[0].image" in errors


def test_rejects_port_that_is_not_a_number():
    errors = errors_of({"name": "svc", "containers": [{"image": "a", "command": "b", "port": "x"}]})
    assert list(errors) == ["containers[0].port"]


def test_rejects_reserved_port():
    errors = errors_of(
        {"name": "svc", "containers": [{"image": "a", "command": "b", "port": 8080}]}
    )
    assert "reserved" in errors["containers[0].port"][0]


def test_rejects_negative_instance_count():
    assert "metadata.instance" in errors_of(tiny(metadata={"instance": -1}))


def test_rejects_unknown_engine():
    errors = errors_of({"name": "svc", "llm": {"engine": "llama.cpp", "model": "m"}})
    assert "unknown engine" in errors["llm.engine"][0]


def test_rejects_unknown_llm_field():
    assert "llm.max_len" in errors_of(tiny(llm={"engine": "vllm", "model": "m", "max_len": 5}))


def test_names_every_bad_field_at_once():
    errors = errors_of(
        {"name": "9lives", "containers": [{"image": "a b", "port": 0}], "metadata": {"gpu": -1}}
    )
    assert {"name", "containers[0].image", "containers[0].port", "metadata.gpu"} <= set(errors)


def test_rejects_command_and_script_together():
    errors = errors_of({"name": "s", "containers": [{"image": "a", "command": "x", "script": "y"}]})
    assert "containers[0]" in errors


def test_rejects_duplicate_mount_paths():
    storage = [{"mount_path": "/data", "empty_dir": {}}, {"mount_path": "/data/", "empty_dir": {}}]
    assert "storage[1].mount_path" in errors_of(tiny(storage=storage))


def test_rejects_shared_memory_given_twice():
    storage = [{"mount_path": "/dev/shm", "empty_dir": {"medium": "memory", "size_limit": 8}}]
    assert "metadata.shm_size" in errors_of(tiny(storage=storage, metadata={"shm_size": 8}))


def test_rejects_object_storage_path_without_bucket():
    storage = [{"mount_path": "/models", "oss": {"path": "oss:///llama"}}]
    assert "storage[0]" in errors_of(tiny(storage=storage))


def test_rejects_model_path_escaping_the_model_store():
    assert "llm.model" in errors_of(tiny(llm={"engine": "vllm", "model": "../etc"}))


def test_rejects_non_object_spec():
    assert errors_of([1, 2]) == {"spec": ["the spec must be a JSON object"]}


def test_spec_hash_changes_with_the_spec():
    a = parse_spec(tiny())
    b = parse_spec(tiny(metadata={"cpu": 2}))
    assert a.spec_hash() == parse_spec(tiny()).spec_hash()
    assert a.spec_hash() != b.spec_hash()


def test_scaling_does_not_change_the_spec_hash():
    role = {"instance": 1}
    pd = {"prefill": role, "decode": role}
    scaled = {"prefill": role, "decode": {"instance": 3}}
    a = parse_spec(tiny(llm={"engine": "vllm-cpu", "model": "m", "pd": pd}))
    b = parse_spec(tiny(llm={"engine": "vllm-cpu", "model": "m", "pd": scaled},
                        metadata={"instance": 4}))  # fmt: skip
    assert a.spec_hash() == b.spec_hash()


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"metadata": {"instance": "1"}}, "metadata.instance"),
        ({"metadata": {"gpu": True}}, "metadata.gpu"),
        ({"metadata": {"memory": 10**30}}, "metadata.memory"),
        ({"metadata": {"cpu": "2"}}, "metadata.cpu"),
        ({"metadata": {"rpc": {"rate_limit": "10"}}}, "metadata.rpc.rate_limit"),
        ({"metadata": {"rpc": {"keepalive": 10**20}}}, "metadata.rpc.keepalive"),
        ({"llm": {"engine": "vllm-cpu", "model": "m", "max_model_len": 10**12}},
         "llm.max_model_len"),
        ({"llm": {"engine": "vllm-cpu", "model": "m", "options": {"--x": 10**30}}},
         "llm.options.--x"),
        ({"llm": {"engine": "vllm-cpu", "model": "m", "quantization": "a b"}}, "llm.quantization"),
        ({"llm": {"engine": "vllm-cpu", "model": "m" * 2000}}, "llm.model"),
        ({"llm": {"engine": "vllm-cpu", "model": "m", "extra_args": ["x"] * 300}},
         "llm.extra_args"),
        ({"containers": [{"image": "i", "command": "c" * 70_000}]}, "containers[0].command"),
        ({"containers": [{"image": "i", "command": "c", "env": [{"name": "A", "value": 1}]}]},
         "containers[0].env[0].value"),
        ({"storage": [{"mount_path": "/x" * 600, "empty_dir": {}}]}, "storage[0].mount_path"),
        ({"llm": {"engine": "vllm-cpu", "model": "m", "options": {"--x\ny": 1}}}, "llm.options"),
        ({"name": "preview"}, "name"),
        ({"name": "Preview"}, "name"),
    ],
)  # fmt: skip
def test_types_are_types_and_every_value_has_a_bound(overrides, path):
    assert path in errors_of(tiny(**overrides))


def test_a_whole_number_is_a_number_of_cpus():
    assert parse_spec(tiny(metadata={"cpu": 2})).metadata.cpu == 2.0
