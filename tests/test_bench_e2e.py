"""`wharf bench` end to end: the installed console script against a whole stack (API, worker,
gateway, Redis, the database) serving the tiny model with vLLM's CPU build as a local process.

The engine's own counters (/metrics) say how many prompt and output tokens it processed: they
must be exactly what the benchmark asked, which proves the prompts' lengths without trusting
the CLI's reading of the answers. Without --tokenizer it counts with the service's own, which
the node that runs it reads wherever the model comes from: the model store, object storage (a
real S3 server, moto) or a hub (a local one that answers as Hugging Face Hub does)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import boto3
import pytest

from controlplane.services.tiny_model import write_tiny_model
from tests.hub_fake import FakeHub
from tests.hub_models import tiny_files
from tests.moto_support import KEY_ID, SECRET
from tests.system import start_system
from wharfcli.bench.runner import PROBE_TEXT_TOKENS
from wharfcli.bench.stats import FIGURES

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
WHARF = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "wharf"
NAME = "bench-tiny"
PROBE_TOKENS = 1 + PROBE_TEXT_TOKENS  # the tokenizer check's prompt: BOS and text; 1 output


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    models = tmp_path_factory.mktemp("bench-models")
    write_tiny_model(models / "tiny-llama")
    return models


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as fake:
        fake.add_repo("wharf/tiny", tiny_files())
        yield fake


@pytest.fixture(scope="module")
def system(tmp_path_factory, redis_url, models, moto, hub):
    home = tmp_path_factory.mktemp("wharf-bench")
    sources = {"WHARF_S3_ENDPOINT": moto.url, "WHARF_S3_ACCESS_KEY_ID": KEY_ID,
               "WHARF_S3_ACCESS_KEY_SECRET": SECRET, "WHARF_HF_ENDPOINT": hub.url}  # fmt: skip
    # Staff let the workspace read the bench bucket with the platform's keys (contracts.grants).
    system = start_system("process", home, models, redis_url, sources, redis_number=6,
                          database="wharf_bench", token_name="bench",
                          grants={"platform_buckets": ["s3://bench-models"]})  # fmt: skip
    yield system
    system.remove_instances()  # of a service a failed test left behind
    system.stack.stop()


@pytest.fixture(scope="module")
def service(system):
    """The tiny model deployed: its service token; deleted (and gone) afterwards."""
    spec = {"name": NAME, "metadata": {"instance": 1, "shm_size": 1},
            "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "served_model_name": "tiny",
                    "max_model_len": 512, "max_num_seqs": 4}}  # fmt: skip
    with system.api() as api:
        created = api.post("/services", json=spec)
        assert created.status_code == 201, created.text
    deployed = system.wait_phase(NAME, {"running", "failed"}, timeout=420)
    assert deployed["phase"] == "running", deployed
    yield created.json()["token"]
    with system.api() as api:
        api.delete(f"/services/{NAME}")
    system.wait_phase(NAME, {"gone"}, timeout=120)


@pytest.fixture(scope="module")
def wharf(system, tmp_path_factory):
    """`wharf ARGS...` as a user runs it: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHARF_")}
    env |= {"WHARF_CONFIG_DIR": str(tmp_path_factory.mktemp("bench-config")),
            "WHARF_API": system.stack.api_url, "WHARF_TOKEN": system.admin_token}  # fmt: skip

    def run(*args: str):
        done = subprocess.run([str(WHARF), *args], env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        return done.returncode, done.stdout, done.stderr

    return run


def engine_tokens(system) -> tuple[float, float]:
    """(prompt tokens, output tokens) the engine has processed since it started."""
    with system.api() as api:
        (instance,) = api.get(f"/services/{NAME}/instances").json()
    counters = {}
    with system.engine(instance) as engine:
        page = engine.get("/metrics").text
    for line in page.splitlines():
        if line.startswith(("vllm:prompt_tokens_total", "vllm:generation_tokens_total")):
            counters[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    return counters["vllm:prompt_tokens_total"], counters["vllm:generation_tokens_total"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def stored(wharf, kind: str) -> dict:
    code, out, err = wharf("bench", "list", NAME, "--kind", kind, "-o", "json")
    assert code == 0, err
    (run,) = json.loads(out)
    return run


def test_static_prompts_and_outputs_have_the_asked_lengths_and_are_stored(
    system, service, wharf, tmp_path
):
    before = engine_tokens(system)
    code, out, err = wharf(
        "bench", "static", NAME, "--parallel-num", "1", "2", "--prompt-tokens", "32", "64",
        "--output-tokens", "8", "8", "--epochs", "1", "--csv", str(tmp_path / "static.csv"),
        "--token", service,
    )  # fmt: skip
    assert code == 0, err
    assert f"counts a {PROBE_TOKENS}-token prompt as {PROBE_TOKENS}" in err  # service tokenizer
    assert "stored as benchmark run" in err and "parallel 2, prompt 64, output 8" in out
    rows = read_csv(tmp_path / "static.csv")
    points = [(r["parallel_num"], r["prompt_tokens"]) for r in rows]
    assert points == [("1", "32"), ("2", "32"), ("1", "64"), ("2", "64")]
    for row in rows:
        assert (row["requests"], row["failed"], row["token_mismatches"]) == (
            row["parallel_num"], "0", "0")  # fmt: skip
        assert float(row["mean_prompt_tokens"]) == int(row["prompt_tokens"])
        assert float(row["mean_output_tokens"]) == 8
        assert all(float(row[f"{t}_p50"]) > 0 for t in ("latency_ms", "ttft_ms", "tpot_ms"))
        assert float(row["output_throughput"]) > 0
    after = engine_tokens(system)
    asked_prompt = sum(int(r["prompt_tokens"]) * int(r["requests"]) for r in rows)
    asked_output = sum(8 * int(r["requests"]) for r in rows)
    assert after[0] - before[0] == asked_prompt + PROBE_TOKENS
    assert after[1] - before[1] == asked_output + 1
    run = stored(wharf, "static")
    assert len(run["rows"]) == 4 and run["parameters"]["prompt_tokens"] == [32, 64]
    assert run["rows"][3]["output_throughput"] == float(rows[3]["output_throughput"])
    assert set(run["rows"][0]) == {"parallel_num", "prompt_tokens", "output_tokens", *FIGURES}


def test_dynamic_on_a_generated_dataset_sends_each_rate_and_is_stored(
    system, service, wharf, models, tmp_path
):
    dataset = tmp_path / "custom.json"
    code, _, err = wharf(
        "bench", "dataset", "--tokenizer", str(models / "tiny-llama"), "--min-input", "16",
        "--max-input", "96", "--avg-input", "48", "--std-input", "20", "--min-output", "4",
        "--max-output", "8", "--avg-output", "6", "--std-output", "2", "--num-requests", "12",
        "-o", str(dataset),
    )  # fmt: skip
    assert code == 0, err
    entries = json.loads(dataset.read_text())
    before = engine_tokens(system)
    code, out, err = wharf(
        "bench", "dynamic", NAME, "--request-rate", "2", "4", "--num-prompts", "6", "6",
        "--dataset", str(dataset), "--dataset-type", "custom", "--csv", str(tmp_path / "d.csv"),
        "--seed", "3", "--token", service, "--tokenizer", str(models / "tiny-llama"),
    )  # fmt: skip
    assert code == 0, err
    rows = read_csv(tmp_path / "d.csv")
    assert [(r["request_rate"], r["num_prompts"], r["requests"]) for r in rows] == [
        ("2.0", "6", "6"), ("4.0", "6", "6")]  # fmt: skip
    assert all((r["failed"], r["token_mismatches"]) == ("0", "0") for r in rows)
    assert all(float(r["ttft_ms_p99"]) >= float(r["ttft_ms_p50"]) > 0 for r in rows)
    # Every prompt the engine saw came from the dataset, at the length it was made.
    lengths = {e["prompt_tokens"] for e in entries}
    assert all(float(r["mean_prompt_tokens"]) <= max(lengths) for r in rows)
    after = engine_tokens(system)
    sent_prompt = sum(float(r["mean_prompt_tokens"]) * 6 for r in rows)
    sent_output = sum(float(r["mean_output_tokens"]) * 6 for r in rows)
    assert after[0] - before[0] == pytest.approx(sent_prompt + PROBE_TOKENS, abs=0.1)
    assert after[1] - before[1] == pytest.approx(sent_output + 1, abs=0.1)
    run = stored(wharf, "dynamic")
    assert [row["request_rate"] for row in run["rows"]] == [2.0, 4.0]
    assert run["parameters"]["dataset_type"] == "custom" and run["created_by"]


# The tiny model staged by the node rather than found in its store.
STAGED = {"bench-s3": "s3://bench-models/tiny/", "bench-hf": "hf://wharf/tiny"}


@pytest.fixture(scope="module")
def staged_services(system, moto, models):
    """The tiny model deployed from object storage and from a hub, both at once: {name: its
    service token}; deleted (and gone) afterwards."""
    s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1",
                      aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
    s3.create_bucket(Bucket="bench-models")
    for path in (models / "tiny-llama").iterdir():
        s3.upload_file(str(path), "bench-models", f"tiny/{path.name}")
    tokens = {}
    with system.api() as api:
        for name, model in STAGED.items():
            spec = {"name": name, "metadata": {"instance": 1, "shm_size": 1},
                    "llm": {"engine": "vllm-cpu", "model": model, "max_model_len": 512,
                            "max_num_seqs": 4}}  # fmt: skip
            created = api.post("/services", json=spec)
            assert created.status_code == 201, created.text
            tokens[name] = created.json()["token"]
    for name in STAGED:
        deployed = system.wait_phase(name, {"running", "failed"}, timeout=420)
        assert deployed["phase"] == "running", deployed
    yield tokens
    with system.api() as api:
        for name in STAGED:
            api.delete(f"/services/{name}")
    for name in STAGED:
        system.wait_phase(name, {"gone"}, timeout=120)


@pytest.mark.parametrize("name", sorted(STAGED))
def test_static_counts_with_the_tokenizer_the_node_reads_wherever_the_model_comes_from(
    system, staged_services, wharf, tmp_path, name
):
    """No --tokenizer: the service's own, read on its node (the API host's store has only
    tiny-llama under its own name, so nothing else could have served it)."""
    code, out, err = wharf(
        "bench", "static", name, "--parallel-num", "1", "--prompt-tokens", "24",
        "--output-tokens", "4", "--epochs", "1", "--csv", str(tmp_path / "static.csv"),
        "--token", staged_services[name], "--no-store",
    )  # fmt: skip
    assert code == 0, err
    assert f"counts a {PROBE_TOKENS}-token prompt as {PROBE_TOKENS}" in err
    (row,) = read_csv(tmp_path / "static.csv")
    assert (row["requests"], row["failed"], row["token_mismatches"]) == ("1", "0", "0")
    assert float(row["mean_prompt_tokens"]) == 24
    with system.api() as api:
        served = api.get(f"/services/{name}/tokenizer").json()
    assert served["model"] == STAGED[name] and served["node"], served
