"""Each engine adapter against its engine's documented command line, and the example specs."""

import json
from pathlib import Path

import pytest

from contracts.engines import ContainerPlan, Mount, Placement, render, validate
from contracts.spec import ServiceSpec, parse_spec

GIB = 1024**3
DEPLOY_SPECS = sorted((Path(__file__).parent.parent / "deploy_specs").glob("*.json"))
PROCESS = Placement(in_container=False, model_store="/srv/models", host="127.0.0.1", port=41000)


def spec(engine: str, cards: int = 1, env: dict | None = None, **llm) -> ServiceSpec:
    kind = "npu" if engine == "vllm-ascend" else "gpu"
    data: dict = {
        "name": "svc",
        "llm": {"engine": engine, "model": "m", **llm},
        "metadata": {kind: cards} if engine != "vllm-cpu" else {},
    }
    if env:
        data["containers"] = [{"env": [{"name": k, "value": v} for k, v in env.items()]}]
    return parse_spec(data)


def plan(engine: str, cards: int = 1, placement: Placement | None = None, **llm) -> ContainerPlan:
    return render(spec(engine, cards, **llm), placement or Placement(devices=tuple(range(cards))))


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def errors(engine: str, cards: int = 1, **llm) -> dict[str, list[str]]:
    return validate(spec(engine, cards, **llm))


# vLLM (CUDA and CPU)


def test_vllm_renders_the_documented_serving_flags():
    args = plan(
        "vllm", cards=2, tensor_parallel_size=2, max_model_len=8192, gpu_memory_utilization=0.9,
        max_num_seqs=64, max_num_batched_tokens=4096, enable_chunked_prefill=True,
        quantization="awq", kv_cache_dtype="fp8", dtype="float16",
    ).args  # fmt: skip
    assert args[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(args, "--tensor-parallel-size") == "2"
    assert flag(args, "--max-model-len") == "8192"
    assert flag(args, "--gpu-memory-utilization") == "0.9"
    assert flag(args, "--max-num-seqs") == "64"
    assert flag(args, "--max-num-batched-tokens") == "4096"
    assert "--enable-chunked-prefill" in args
    assert flag(args, "--quantization") == "awq"
    assert flag(args, "--kv-cache-dtype") == "fp8"
    assert flag(args, "--dtype") == "float16"


def test_cuda_vllm_gets_its_allocated_gpus_and_multi_card_shared_memory():
    cuda = render(spec("vllm", cards=2, tensor_parallel_size=2), Placement(devices=(2, 3)))
    assert cuda.gpus == (2, 3)
    assert cuda.image == "vllm/vllm-openai:v0.32.0"
    assert cuda.shm_size_bytes == 64 * GIB
    assert plan("vllm").shm_size_bytes == GIB


def test_vllm_cpu_takes_no_gpus():
    assert render(spec("vllm-cpu"), Placement(devices=(0,))).gpus == ()


def test_chunked_prefill_size_becomes_the_step_token_budget():
    args = plan("vllm", chunked_prefill_size=2048).args
    assert flag(args, "--max-num-batched-tokens") == "2048"
    assert "--enable-chunked-prefill" in args
    args = plan("vllm", max_num_batched_tokens=8192, chunked_prefill_size=8192).args
    assert args.count("--max-num-batched-tokens") == 1


def test_chunked_prefill_can_be_turned_off():
    args = plan("vllm", enable_chunked_prefill=False).args
    assert "--no-enable-chunked-prefill" in args
    assert "--enable-chunked-prefill" not in args


def test_vllm_draft_model_becomes_a_speculative_config_with_its_own_mount():
    p = plan("vllm", speculative={"model": "draft", "num_speculative_tokens": 3})
    config = json.loads(flag(p.args, "--speculative-config"))
    assert config == {
        "model": "/models/draft",
        "num_speculative_tokens": 3,
        "method": "draft_model",
    }
    assert {m.target for m in p.mounts} == {"/models/m", "/models/draft"}


def test_vllm_draft_model_on_a_host_process_is_read_from_the_host_store():
    p = render(spec("vllm", speculative={"model": "draft"}), PROCESS)
    assert json.loads(flag(p.args, "--speculative-config"))["model"] == "/srv/models/draft"


def test_a_draft_that_is_the_main_model_is_mounted_once():
    assert len(plan("vllm", speculative={"model": "m"}).mounts) == 1


@pytest.mark.parametrize("method", ["ngram", "mtp"])
def test_ngram_and_mtp_speculate_without_a_draft_model(method):
    config = json.loads(flag(plan("vllm", speculative={"method": method}).args,
                             "--speculative-config"))  # fmt: skip
    assert config == {"num_speculative_tokens": 4, "method": method}


def test_options_are_flags_and_extra_args_come_last():
    args = plan(
        "vllm",
        options={"--enable-prefix-caching": True, "--disable-log-requests": False,
                 "--block-size": 16},
        extra_args=["--seed", "7"],
    ).args  # fmt: skip
    assert "--enable-prefix-caching" in args
    assert "--disable-log-requests" not in args
    assert flag(args, "--block-size") == "16"
    assert args[-2:] == ["--seed", "7"]


def test_enforce_eager_given_as_an_option_is_not_repeated_on_cpu():
    args = plan("vllm-cpu", options={"--enforce-eager": True}).args
    assert args.count("--enforce-eager") == 1


def test_vllm_validation():
    assert errors("vllm") == {}
    assert "llm.quantization" in errors("vllm", quantization="w8a8")
    assert "llm.kv_cache_dtype" in errors("vllm", kv_cache_dtype="int8")
    assert "llm.chunked_prefill_size" in errors(
        "vllm", chunked_prefill_size=1024, max_num_batched_tokens=2048
    )
    assert "llm.chunked_prefill_size" in errors(
        "vllm", chunked_prefill_size=1024, enable_chunked_prefill=False
    )


# vLLM on Ascend


def test_vllm_ascend_passes_the_allocated_npus_and_the_driver():
    p = render(spec("vllm-ascend", cards=2, tensor_parallel_size=2), Placement(devices=(4, 5)))
    assert p.device_paths == (
        "/dev/davinci4", "/dev/davinci5",
        "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc",
    )  # fmt: skip
    driver = [m for m in p.mounts if m.target != "/models/m"]
    assert {m.target for m in driver} >= {
        "/usr/local/Ascend/driver", "/usr/local/sbin/npu-smi", "/etc/ascend_install.info",
    }  # fmt: skip
    assert all(m.kind == "bind" and m.source == m.target and m.read_only for m in driver)
    # A container numbers the NPUs it was given from 0.
    assert p.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
    assert p.gpus == ()
    assert p.image.startswith("quay.io/ascend/vllm-ascend:")
    assert p.shm_size_bytes == 64 * GIB
    assert flag(p.args, "--tensor-parallel-size") == "2"


@pytest.mark.parametrize("npu_smi", ["/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi"])
def test_vllm_ascend_mounts_npu_smi_where_the_node_has_it(npu_smi):
    p = render(spec("vllm-ascend"), Placement(devices=(0,), npu_smi=npu_smi))
    binds = {m.source: m for m in p.mounts if m.kind == "bind"}
    assert binds[npu_smi].target == npu_smi and binds[npu_smi].read_only
    other = {"/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi"} - {npu_smi}
    assert not other & set(binds)
    assert "/usr/local/Ascend/driver" in binds


def test_vllm_ascend_on_a_node_without_npu_smi_mounts_the_driver_alone():
    p = render(spec("vllm-ascend"), Placement(devices=(0,), npu_smi=""))
    sources = {m.source for m in p.mounts}
    assert not any(s.endswith("npu-smi") for s in sources)
    assert {"/usr/local/Ascend/driver", "/etc/ascend_install.info"} <= sources


@pytest.mark.parametrize(
    ("present", "on_path", "found"),
    [
        ({"sbin", "bin"}, False, "sbin"),
        ({"bin"}, True, "bin"),
        (set(), True, "path"),
        (set(), False, ""),
    ],
)
def test_the_node_finds_its_npu_smi(tmp_path, monkeypatch, present, on_path, found):
    """Real files: the driver's two places in order, then PATH."""
    from contracts.engines import vllm_ascend

    for folder in ("sbin", "bin", "path"):
        (tmp_path / folder).mkdir()
        if folder in present or (folder == "path" and on_path):
            (tmp_path / folder / "npu-smi").write_text("#!/bin/sh\n")
            (tmp_path / folder / "npu-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    places = (str(tmp_path / "sbin" / "npu-smi"), str(tmp_path / "bin" / "npu-smi"))
    expected = str(tmp_path / found / "npu-smi") if found else ""
    assert vllm_ascend.find_npu_smi(places) == expected


def test_vllm_ascend_as_a_host_process_names_the_host_npus():
    p = render(spec("vllm-ascend", cards=2), Placement(in_container=False, devices=(4, 5)))
    assert p.env["ASCEND_RT_VISIBLE_DEVICES"] == "4,5"
    assert p.device_paths == ()
    assert p.mounts == []


def test_vllm_ascend_renders_vllm_flags():
    p = plan("vllm-ascend", max_model_len=4096, max_num_seqs=256, max_num_batched_tokens=4096,
             gpu_memory_utilization=0.9, served_model_name="qwen")  # fmt: skip
    assert p.args[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(p.args, "--max-model-len") == "4096"
    assert flag(p.args, "--max-num-batched-tokens") == "4096"
    assert flag(p.args, "--gpu-memory-utilization") == "0.9"
    assert flag(p.args, "--served-model-name") == "qwen"
    assert p.health_path == "/health"


@pytest.mark.parametrize("alias", ["w8a8", "smoothquant", "w4a16", "ascend"])
def test_msmodelslim_schemes_use_the_ascend_quantization(alias):
    assert flag(plan("vllm-ascend", quantization=alias).args, "--quantization") == "ascend"


def test_int8_kv_cache_comes_with_msmodelslim_weights():
    p = plan("vllm-ascend", quantization="w8a8", kv_cache_dtype="int8")
    assert "--kv-cache-dtype" not in p.args
    assert errors("vllm-ascend", quantization="w8a8", kv_cache_dtype="int8") == {}
    assert "llm.kv_cache_dtype" in errors("vllm-ascend", kv_cache_dtype="int8")
    assert "llm.kv_cache_dtype" in errors("vllm-ascend", kv_cache_dtype="fp8")


def test_vllm_ascend_validation():
    assert "msModelSlim" in errors("vllm-ascend", quantization="awq")["llm.quantization"][0]
    assert "llm.quantization" in errors("vllm-ascend", quantization="bogus")
    too_many = {"method": "ngram", "num_speculative_tokens": 16}
    assert "llm.speculative.num_speculative_tokens" in errors("vllm-ascend", speculative=too_many)
    assert errors("vllm-ascend", speculative={"method": "mtp", "num_speculative_tokens": 2}) == {}


def test_vllm_ascend_speculates_like_vllm():
    p = plan("vllm-ascend", speculative={"method": "eagle3", "model": "eagle"})
    config = json.loads(flag(p.args, "--speculative-config"))
    assert config == {"model": "/models/eagle", "num_speculative_tokens": 4, "method": "eagle3"}


# BladeLLM


def test_bladellm_command_line():
    p = plan("bladellm", cards=2, tensor_parallel_size=2, gpu_memory_utilization=0.85,
             chunked_prefill_size=2048, kv_cache_dtype="fp8")  # fmt: skip
    assert p.args == [
        "blade_llm_server", "--host", "0.0.0.0", "--port", "8081", "--model", "/models/m",
        "--tensor_parallel_size", "2", "--max_gpu_memory_utilization", "0.85",
        "--ragged_flash_max_batch_tokens", "2048", "--kv_cache_quant", "fp8_e4m3",
    ]  # fmt: skip
    assert p.port == 8081
    assert p.health_path == ""  # no documented health endpoint: TCP
    assert p.gpus == (0, 1)
    assert p.shm_size_bytes == 64 * GIB  # EAS's multi-card default
    assert plan("bladellm").shm_size_bytes is None
    assert "/pai-eas/blade-llm:" in p.image


def test_bladellm_draft_model_is_speculative_sampling():
    args = plan("bladellm", speculative={"model": "draft", "num_speculative_tokens": 5}).args
    assert args[-6:] == ["--decode_algo", "sps", "--gamma", "5", "--draft.model", "/models/draft"]


def test_bladellm_validation():
    assert "llm.speculative.method" in errors("bladellm", speculative={"method": "ngram"})
    assert "llm.quantization" in errors("bladellm", quantization="gptq")
    assert "llm.max_model_len" in errors("bladellm", max_model_len=4096)
    assert "llm.kv_cache_dtype" in errors("bladellm", kv_cache_dtype="fp4")
    assert "llm.enable_chunked_prefill" in errors("bladellm", enable_chunked_prefill=False)


def test_port_8080_stays_the_gateways():
    with pytest.raises(ValueError, match="reserved"):
        parse_spec({"name": "s", "llm": {"engine": "bladellm", "model": "m"},
                    "containers": [{"port": 8080}], "metadata": {"gpu": 1}})  # fmt: skip


# Text Generation Inference


def test_tgi_command_line():
    p = plan("tgi", quantization="gptq", max_model_len=4096, max_num_seqs=128,
             max_num_batched_tokens=16384, chunked_prefill_size=2048,
             gpu_memory_utilization=0.9, kv_cache_dtype="fp8_e5m2")  # fmt: skip
    assert p.args == [
        "text-generation-launcher", "--model-id", "/models/m", "--hostname", "0.0.0.0",
        "--port", "80", "--num-shard", "1",
        "--max-total-tokens", "4096", "--max-input-tokens", "4095",
        "--max-concurrent-requests", "128", "--max-batch-total-tokens", "16384",
        "--max-batch-prefill-tokens", "2048",
        "--quantize", "gptq", "--kv-cache-dtype", "fp8_e5m2",
        "--cuda-memory-fraction", "0.9",
    ]  # fmt: skip
    assert (p.health_path, p.metrics_path) == ("/health", "/metrics")
    assert p.image.startswith("ghcr.io/huggingface/text-generation-inference:")
    assert p.env["HF_HUB_OFFLINE"] == "1"
    assert p.env["USAGE_STATS"] == "off"
    assert p.gpus == (0,)


def test_tgi_shards_over_its_gpus():
    args = plan("tgi", cards=2, tensor_parallel_size=2).args
    i = args.index("--sharded")
    assert args[i : i + 4] == ["--sharded", "true", "--num-shard", "2"]


def test_tgi_speculates_by_itself():
    assert flag(plan("tgi", speculative={"method": "ngram", "num_speculative_tokens": 2}).args,
                "--speculate") == "2"  # fmt: skip
    assert errors("tgi", speculative={"method": "ngram"}) == {}


def test_tgi_refuses_draft_models():
    assert "llm.speculative.model" in errors("tgi", speculative={"model": "draft"})
    assert "llm.speculative.model" in errors("tgi", speculative={"method": "medusa", "model": "d"})
    assert "llm.speculative.method" in errors("tgi", speculative={"method": "mtp"})


def test_tgi_validation():
    assert "llm.quantization" in errors("tgi", quantization="awq_marlin")
    assert "llm.quantization" in errors("tgi", cards=2, tensor_parallel_size=2, quantization="exl2")
    assert "llm.dtype" in errors("tgi", quantization="awq", dtype="bfloat16")
    assert "llm.dtype" in errors("tgi", dtype="float32")
    assert "llm.kv_cache_dtype" in errors("tgi", kv_cache_dtype="int8")
    for choice in ("awq", "eetq", "exl2", "gptq", "marlin", "bitsandbytes", "bitsandbytes-nf4",
                   "bitsandbytes-fp4", "fp8"):  # fmt: skip
        assert errors("tgi", quantization=choice) == {}


# PaddleNLP serving


def test_paddlenlp_is_configured_by_environment():
    s = spec("paddlenlp", cards=2, tensor_parallel_size=2, max_model_len=8192, max_num_seqs=48,
             kv_cache_dtype="int8", env={"BLOCK_BS": "5", "MAX_DEC_LEN": "1024"})  # fmt: skip
    p = render(s, Placement(devices=(2, 3)))
    assert p.args == ["/bin/bash", "-c", "start_server && tail -f /dev/null"]
    assert {k: p.env[k] for k in ("MODEL_DIR", "MP_NUM", "MAX_SEQ_LEN", "BATCH_SIZE")} == {
        "MODEL_DIR": "/models/m", "MP_NUM": "2", "MAX_SEQ_LEN": "8192", "BATCH_SIZE": "48",
    }  # fmt: skip
    assert p.env["CUDA_VISIBLE_DEVICES"] == "0,1"  # Docker renumbers the GPUs it hands over
    assert p.env["USE_CACHE_KV_INT8"] == "1"
    assert (p.env["BLOCK_BS"], p.env["MAX_DEC_LEN"]) == ("5", "1024")
    assert p.gpus == (2, 3)
    assert p.shm_size_bytes == 64 * GIB


def test_paddlenlp_ports_and_health():
    p = plan("paddlenlp")
    assert p.port == 9965
    assert p.env["SERVICE_HTTP_PORT"] == p.env["PUSH_MODE_HTTP_PORT"] == "9965"
    assert p.env["HEALTH_HTTP_PORT"] == p.env["HTTP_PORT"] == "8110"
    assert {"SERVICE_GRPC_PORT", "METRICS_HTTP_PORT", "INTER_PROC_PORT"} <= p.env.keys()
    assert p.health_path == ""  # /v2/health/ready lives on HEALTH_HTTP_PORT
    assert p.shm_size_bytes == 5 * GIB
    assert p.image.endswith("paddlenlp:llm-serving-cuda124-cudnn9-v2.3")


def test_paddlenlp_as_a_host_process():
    p = render(spec("paddlenlp", cards=2, tensor_parallel_size=2),
               Placement(in_container=False, model_store="/srv/models", port=41000,
                         devices=(2, 3)))  # fmt: skip
    assert p.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert p.env["SERVICE_HTTP_PORT"] == "41000"
    assert p.env["MODEL_DIR"] == "/srv/models/m"


def test_paddlenlp_speculative_mtp_reads_the_exported_weights():
    p = plan("paddlenlp", speculative={"method": "mtp", "model": "m-mtp",
                                       "num_speculative_tokens": 1})  # fmt: skip
    assert {k: v for k, v in p.env.items() if k.startswith("SPECULATE_")} == {
        "SPECULATE_METHOD": "mtp", "SPECULATE_MAX_DRAFT_TOKEN_NUM": "1",
        "SPECULATE_MODEL_PATH": "/models/m-mtp",
    }  # fmt: skip
    assert errors("paddlenlp", speculative={"method": "mtp", "model": "m-mtp"}) == {}


def test_paddlenlp_validation():
    assert "llm.speculative.method" in errors("paddlenlp", speculative={"model": "draft"})
    assert "llm.speculative.model" in errors("paddlenlp", speculative={"method": "mtp"})
    assert "llm.quantization" in errors("paddlenlp", quantization="weight_only_int8")
    assert "llm.options" in errors("paddlenlp", options={"--x": 1})
    assert "llm.extra_args" in errors("paddlenlp", extra_args=["--x"])
    assert "llm.max_num_seqs" in errors("paddlenlp", max_num_seqs=129)
    assert "llm.gpu_memory_utilization" in errors("paddlenlp", gpu_memory_utilization=0.9)
    assert errors("paddlenlp", dtype="auto", max_num_seqs=128) == {}


# A given command (custom)


def custom(metadata: dict, **llm) -> ServiceSpec:
    data: dict = {"name": "s", "containers": [{"image": "i", "command": "serve"}],
                  "metadata": metadata}  # fmt: skip
    if llm:
        data["llm"] = {"engine": "vllm", "model": "m", **llm}
    return parse_spec(data)


def test_a_given_command_keeps_its_cards():
    assert render(custom({"gpu": 1}), Placement(devices=(3,))).gpus == (3,)
    assert render(custom({}), Placement()).gpus == ()
    npu = render(custom({"npu": 1}), Placement(devices=(2,)))
    assert npu.device_paths[0] == "/dev/davinci2"
    assert Mount("bind", "/usr/local/Ascend/driver", "/usr/local/Ascend/driver") in npu.mounts


def test_a_given_command_cannot_speculate():
    assert "llm.speculative" in validate(custom({"gpu": 1}, speculative={"model": "d"}))
    assert validate(custom({"gpu": 1})) == {}


# The example specs


@pytest.mark.parametrize("path", DEPLOY_SPECS, ids=lambda p: p.name)
def test_every_example_spec_validates_and_renders(path):
    s = parse_spec(json.loads(path.read_text()))
    assert validate(s) == {}
    cards = s.metadata.npu or s.metadata.gpu
    p = render(s, Placement(devices=tuple(range(cards))))
    assert p.args and p.image and p.port
    if s.llm and s.llm.engine not in ("vllm-cpu", "vllm-ascend") and s.metadata.gpu:
        assert p.gpus == tuple(range(cards))


def test_the_examples_cover_every_engine():
    engines = {json.loads(p.read_text()).get("llm", {}).get("engine") for p in DEPLOY_SPECS}
    assert engines >= {"vllm", "vllm-cpu", "vllm-ascend", "bladellm", "tgi", "paddlenlp"}
