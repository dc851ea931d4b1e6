"""workers/hub.py against tests/hub_fake.py, a fake Hugging Face Hub and ModelScope on loopback.

"Downloaded once" and "nothing downloaded" are proven by the fake's request log, not by what the
client says it did. No database, no Redis, no network beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.hub_refs import HubRef, parse_hub_ref
from tests.hub_fake import FakeHub
from workers import hub as hubmod
from workers.hub import (
    HF_ENDPOINT,
    MANIFEST,
    MODELSCOPE_ENDPOINT,
    HubError,
    resolve,
    serving_files,
    stage_hub,
)

TOKEN = "hf_SeCrEt_token_0123456789"
SHARD = os.urandom(3_000_000)
MODEL = {
    "config.json": b'{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}',
    "generation_config.json": b'{"do_sample": true}',
    "tokenizer.json": b'{"version": "1.0"}',
    "tokenizer_config.json": b'{"chat_template": "{{ messages }}"}',
    "special_tokens_map.json": b"{}",
    "tokenizer.model": os.urandom(5_000),
    "model-00001-of-00002.safetensors": SHARD,
    "model-00002-of-00002.safetensors": os.urandom(1_500_000),
    "model.safetensors.index.json": b'{"weight_map": {}}',
    "modeling_custom.py": b"class Custom: ...\n",
    # never staged
    "README.md": b"# A model\n",
    ".gitattributes": b"*.safetensors filter=lfs\n",
    "logo.png": os.urandom(2_000),
    "consolidated.pth": os.urandom(4_000),
    "pytorch_model.bin": os.urandom(4_000),
    "pytorch_model.bin.index.json": b'{"weight_map": {}}',
    "optimizer.pt": os.urandom(1_000),
    "checkpoint-500/model.safetensors": os.urandom(1_000),
    "original/consolidated.00.pth": os.urandom(1_000),
}
SERVED = sorted(
    [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "tokenizer.model",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "modeling_custom.py",
    ]
)
TOTAL = sum(len(MODEL[name]) for name in SERVED)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hubmod, "RETRY_DELAY", 0.0)


@pytest.fixture
def fake() -> Iterator[FakeHub]:
    with FakeHub() as hub:
        yield hub


def hf(ref: str) -> HubRef:
    return parse_hub_ref(ref)


def staged_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name != MANIFEST}


def assert_model(folder: Path, files: dict[str, bytes] = MODEL) -> None:
    assert staged_files(folder) == {name: files[name] for name in SERVED}


def assert_token_nowhere(root: Path, *texts: str) -> None:
    for text in texts:
        assert TOKEN not in text
    for path in root.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


# References ---------------------------------------------------------------------------------


def test_references_parse_with_default_revisions() -> None:
    assert parse_hub_ref("hf://meta-llama/Llama-3.1-8B") == HubRef(
        "hf", "meta-llama/Llama-3.1-8B", "main"
    )
    assert parse_hub_ref("modelscope://Qwen/Qwen2.5-7B-Instruct") == HubRef(
        "modelscope", "Qwen/Qwen2.5-7B-Instruct", "master"
    )
    assert parse_hub_ref("hf://org/name@v1.0").revision == "v1.0"
    assert parse_hub_ref("hf://org/name@refs/pr/3").revision == "refs/pr/3"
    assert parse_hub_ref("hf://org/my_model.v2@" + "a" * 40).revision == "a" * 40
    assert parse_hub_ref("hf://org/name").name == "hf://org/name"
    assert (HF_ENDPOINT, MODELSCOPE_ENDPOINT) == (
        "https://huggingface.co",
        "https://www.modelscope.cn",
    )


@pytest.mark.parametrize(
    "ref",
    [
        "org/name",
        "s3://org/name",
        "hf://name",
        "hf://org/name/extra",
        "hf://org/-name",
        "hf://org/name.",
        "hf://org/na--me",
        "hf://org/na..me",
        "hf://org/né",
        "hf://org/name@",
        "hf://org/name@a..b",
        "hf://org/name@branch/",
        "hf://org/name@-x",
        "hf://org/name@with space",
        "hf://" + "o" * 50 + "/" + "n" * 50,
    ],
)
def test_malformed_references_are_refused(ref: str) -> None:
    with pytest.raises(ValueError, match="expected|repository|branch or tag"):
        parse_hub_ref(ref)


def test_serving_files_prefer_one_weight_format() -> None:
    assert serving_files(MODEL) == SERVED
    bins = ["config.json", "pytorch_model.bin", "pytorch_model.bin.index.json", "training_args.bin"]
    assert serving_files(bins + ["model.pt", "README.md"]) == bins[:3]
    mistral = ["params.json", "consolidated.safetensors", "model.safetensors", "tekken.json"]
    assert serving_files(mistral) == ["model.safetensors", "params.json", "tekken.json"]
    assert serving_files(["consolidated.safetensors", "params.json"]) == [
        "consolidated.safetensors",
        "params.json",
    ]
    lora = ["adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", "README.md"]
    assert serving_files(lora) == ["adapter_config.json", "adapter_model.safetensors"]
    assert serving_files(["config.json", "model.pth", "scheduler.pt"]) == [
        "config.json",
        "model.pth",
    ]


# Staging from Hugging Face ------------------------------------------------------------------


def test_a_pinned_commit_is_staged_once_and_reused(fake: FakeHub, tmp_path: Path) -> None:
    commit = fake.add_repo("org/model", MODEL)
    ref = hf(f"hf://org/model@{commit}")

    folder, got = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert (folder, got) == (tmp_path / "hf" / "org" / "model" / commit, commit)
    assert_model(folder)
    assert sorted(s.file[1] for s in fake.downloads() if s.file) == SERVED

    before = len(fake.requests)
    assert stage_hub(ref, tmp_path, token=None, endpoint=fake.url) == (folder, commit)
    assert len(fake.requests) == before  # a complete pinned commit needs no request at all
    # The commit given as `commit=` is the same thing.
    assert stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url, commit=commit)
    assert len(fake.requests) == before
    for name in SERVED:
        assert len(fake.file_gets("org/model", name)) == 1


def test_a_branch_resolves_to_its_commit_and_a_new_commit_to_a_new_folder(
    fake: FakeHub, tmp_path: Path
) -> None:
    first = fake.add_repo("org/model", MODEL)
    ref = hf("hf://org/model")
    assert resolve(ref, None, fake.url) == first

    folder, commit = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert commit == first and folder.name == first
    downloads = len(fake.downloads())
    assert stage_hub(ref, tmp_path, token=None, endpoint=fake.url) == (folder, first)
    assert len(fake.downloads()) == downloads  # resolved again, downloaded nothing

    changed = MODEL | {"config.json": b'{"model_type": "llama", "changed": true}'}
    second = fake.commit("org/model", changed)
    assert resolve(ref, None, fake.url) == second
    new_folder, commit = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert commit == second and new_folder.name == second
    assert_model(new_folder, changed)
    assert_model(folder)  # the old commit's folder stays as it was


def test_a_tag(fake: FakeHub, tmp_path: Path) -> None:
    first = fake.add_repo("org/model", MODEL)
    fake.tag("org/model", "v1.0", first)
    fake.commit("org/model", MODEL | {"config.json": b"{}"})
    assert resolve(hf("hf://org/model@v1.0"), None, fake.url) == first
    folder, commit = stage_hub(hf("hf://org/model@v1.0"), tmp_path, token=None, endpoint=fake.url)
    assert commit == first and folder.name == first
    assert_model(folder)


def test_only_serving_files_are_downloaded(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("org/model", MODEL)
    stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url)
    fetched = {s.file[1] for s in fake.requests if s.file}
    assert fetched == set(SERVED)
    for never in ("README.md", ".gitattributes", "logo.png", "consolidated.pth", "optimizer.pt"):
        assert never not in fetched


def test_a_repository_without_weights_is_refused(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("org/gguf", {"config.json": b"{}", "model-Q4_K_M.gguf": b"GGUF"})
    with pytest.raises(HubError, match="no model weights"):
        stage_hub(hf("hf://org/gguf"), tmp_path, token=None, endpoint=fake.url)


def test_a_gated_model_needs_the_right_token(
    fake: FakeHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.add_repo("org/gated", MODEL, gated=True, token=TOKEN)
    fake.valid_tokens.add("hf_someone_else")
    ref = hf("hf://org/gated")
    messages = []
    for token in (None, "hf_wrong", "hf_someone_else", TOKEN[:-1]):
        with pytest.raises(HubError, match=r"needs an access token \(llm.hub_token\)") as caught:
            stage_hub(ref, tmp_path, token=token, endpoint=fake.url)
        messages.append("".join(traceback.format_exception(caught.value)))
    assert "none was given" in messages[0]
    assert "refused or lacks access" in messages[1] and "refused or lacks access" in messages[2]

    folder, _ = stage_hub(ref, tmp_path, token=TOKEN, endpoint=fake.url)
    assert_model(folder)
    assert all(s.authorized for s in fake.requests[-len(SERVED) :])
    assert_token_nowhere(tmp_path, *messages, *(r.getMessage() for r in caplog.records))
    assert caplog.records  # something was logged, and none of it holds the token


def test_a_private_model_without_a_token_reads_as_missing(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("org/private", MODEL, private=True, token=TOKEN)
    with pytest.raises(HubError) as caught:
        stage_hub(hf("hf://org/private"), tmp_path, token=None, endpoint=fake.url)
    assert str(caught.value) == (
        f"hf://org/private: no such repository on {fake.url}, "
        "or it is private and no token was given"
    )
    folder, _ = stage_hub(hf("hf://org/private"), tmp_path, token=TOKEN, endpoint=fake.url)
    assert_model(folder)
    assert_token_nowhere(tmp_path, str(caught.value))


def test_a_missing_repository_or_revision(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("org/model", MODEL)
    with pytest.raises(HubError, match=r"^hf://org/nothing: no such repository on http://"):
        stage_hub(hf("hf://org/nothing"), tmp_path, token=None, endpoint=fake.url)
    with pytest.raises(HubError, match=r"^hf://org/model: has no revision 'v9' on http://"):
        stage_hub(hf("hf://org/model@v9"), tmp_path, token=None, endpoint=fake.url)
    with pytest.raises(HubError, match="has no revision 'v9'"):
        resolve(hf("hf://org/model@v9"), None, fake.url)
    with pytest.raises(HubError, match=f"has no revision '{'b' * 40}'"):
        stage_hub(hf("hf://org/model@" + "b" * 40), tmp_path, token=None, endpoint=fake.url)
    assert not list(tmp_path.rglob("*.safetensors*"))


def test_an_unreachable_hub(tmp_path: Path) -> None:
    with FakeHub() as gone:
        url = gone.url
    with pytest.raises(HubError, match=f"^cannot reach {url}: "):
        stage_hub(hf("hf://org/model"), tmp_path, token=TOKEN, endpoint=url)


def test_a_dropped_download_continues_where_it_stopped(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("org/model", MODEL)
    fake.cut("org/model", "model-00001-of-00002.safetensors", 1_000_000)
    folder, _ = stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url)
    gets = fake.file_gets("org/model", "model-00001-of-00002.safetensors")
    assert [g.range for g in gets] == [None, "bytes=1000000-"]
    assert_model(folder)


def test_a_stage_that_gave_up_is_continued_by_the_next_one(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hubmod, "DOWNLOAD_ATTEMPTS", 2)
    commit = fake.add_repo("org/model", MODEL)
    shard = "model-00001-of-00002.safetensors"
    fake.cut("org/model", shard, 1_000_000, 2_000_000)
    with pytest.raises(HubError, match="^cannot reach .* stopped at 2000000 of 3000000 bytes"):
        stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url)
    assert not (tmp_path / "hf" / "org" / "model" / commit).exists()

    folder, _ = stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url)
    ranges = [None, "bytes=1000000-", "bytes=2000000-"]
    assert [g.range for g in fake.file_gets("org/model", shard)] == ranges
    for name in SERVED:  # what the first stage finished is kept
        assert len(fake.file_gets("org/model", name)) == (3 if name == shard else 1)
    assert_model(folder)
    assert not list(folder.parent.glob(".*.partial"))


def test_a_hub_in_trouble_is_asked_again(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("org/model", MODEL)
    fake.outage("org/model", "config.json", 503, 502)
    fake.outage("org/model", "tokenizer.json", 429)
    folder, _ = stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url)
    assert_model(folder)
    assert len(fake.file_gets("org/model", "config.json")) == 3
    fake.outage("org/model", "config.json", *[503] * hubmod.DOWNLOAD_ATTEMPTS)
    with pytest.raises(HubError, match=r"^cannot reach .*config.json.*\(HTTP 503\)"):
        stage_hub(hf("hf://org/model"), tmp_path / "other", token=None, endpoint=fake.url)


def test_a_damaged_folder_is_staged_again(fake: FakeHub, tmp_path: Path) -> None:
    commit = fake.add_repo("org/model", MODEL)
    folder, _ = stage_hub(hf(f"hf://org/model@{commit}"), tmp_path, token=None, endpoint=fake.url)
    (folder / "tokenizer.json").unlink()
    (folder / "config.json").write_bytes(b"{}")
    assert stage_hub(hf(f"hf://org/model@{commit}"), tmp_path, token=None, endpoint=fake.url)
    assert_model(folder)
    assert len(fake.file_gets("org/model", "tokenizer.json")) == 2


def test_progress_reaches_the_total(fake: FakeHub, tmp_path: Path) -> None:
    commit = fake.add_repo("org/model", MODEL)
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def progress(done: int, total: int) -> None:
        with lock:
            calls.append((done, total))

    stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url, progress=progress)
    assert len(calls) >= 3 and calls[-1] == (TOTAL, TOTAL)
    assert all(total == TOTAL and 0 <= done <= TOTAL for done, total in calls)
    calls.clear()
    stage_hub(
        hf(f"hf://org/model@{commit}"), tmp_path, token=None, endpoint=fake.url, progress=progress
    )
    assert calls == [(TOTAL, TOTAL)]


def test_concurrent_stagings_of_one_commit_download_once(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("org/model", MODEL)
    results: list[tuple[Path, str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(results)) == 1
    assert_model(results[0][0])
    for name in SERVED:
        assert len(fake.file_gets("org/model", name)) == 1


def test_the_token_is_not_sent_to_a_cdn(tmp_path: Path) -> None:
    with FakeHub(cdn=True) as fake:
        fake.add_repo("org/gated", MODEL, gated=True, token=TOKEN)
        folder, _ = stage_hub(hf("hf://org/gated"), tmp_path, token=TOKEN, endpoint=fake.url)
    assert_model(folder)
    cdn = [s for s in fake.requests if s.path.startswith("/cdn/")]
    assert len(cdn) == 2 and not any(s.authorized or s.cookie for s in cdn)
    assert all(s.authorized for s in fake.requests if not s.path.startswith("/cdn/"))


# Staging from ModelScope --------------------------------------------------------------------


def test_modelscope_branch_tag_and_pinned_commit(fake: FakeHub, tmp_path: Path) -> None:
    first = fake.add_repo("Qwen/Tiny", MODEL, branch="master")
    fake.tag("Qwen/Tiny", "v1.0.0", first)
    ref = parse_hub_ref("modelscope://Qwen/Tiny")
    assert resolve(ref, None, fake.url) == first

    calls: list[tuple[int, int]] = []
    folder, commit = stage_hub(
        ref, tmp_path, token=None, endpoint=fake.url, progress=lambda d, t: calls.append((d, t))
    )
    assert (folder, commit) == (tmp_path / "modelscope" / "Qwen" / "Tiny" / first, first)
    assert_model(folder)
    assert calls[-1] == (TOTAL, TOTAL)
    assert sorted(s.file[1] for s in fake.downloads() if s.file) == SERVED
    assert {s.query["Revision"] for s in fake.downloads()} == {first}  # pinned while downloading

    second = fake.commit("Qwen/Tiny", MODEL | {"config.json": b"{}"}, branch="master")
    tagged = parse_hub_ref("modelscope://Qwen/Tiny@v1.0.0")
    before = len(fake.downloads())
    assert stage_hub(tagged, tmp_path, token=None, endpoint=fake.url) == (folder, first)
    assert len(fake.downloads()) == before
    new_folder, commit = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert commit == second and new_folder.name == second
    pinned = parse_hub_ref(f"modelscope://Qwen/Tiny@{second}")
    requests = len(fake.requests)
    assert stage_hub(pinned, tmp_path, token=None, endpoint=fake.url) == (new_folder, second)
    assert len(fake.requests) == requests


def test_modelscope_errors(fake: FakeHub, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake.add_repo("Qwen/Tiny", MODEL, branch="master")
    fake.add_repo("Qwen/Private", MODEL, branch="master", private=True, token=TOKEN)
    messages = []
    cases = [
        ("modelscope://Qwen/None", None, "no such repository on http://.*no token was given"),
        ("modelscope://Qwen/Tiny@v9", None, "has no revision 'v9'"),
        (f"modelscope://Qwen/Tiny@{'c' * 40}", None, f"has no revision '{'c' * 40}'"),
        ("modelscope://Qwen/Private", None, r"needs an access token \(llm.hub_token\)"),
        ("modelscope://Qwen/Private", "ms-wrong", "refused or lacks access"),
    ]
    for ref, token, message in cases:
        with pytest.raises(HubError, match=message) as caught:
            stage_hub(parse_hub_ref(ref), tmp_path, token=token, endpoint=fake.url)
        messages.append(str(caught.value))

    private = parse_hub_ref("modelscope://Qwen/Private")
    folder, _ = stage_hub(private, tmp_path, token=TOKEN, endpoint=fake.url)
    assert_model(folder)
    mine = [s for s in fake.requests if s.path.startswith("/api/v1/models/Qwen/Private")][-3:]
    assert all(s.authorized and s.cookie for s in mine)
    assert_token_nowhere(tmp_path, *messages, *(r.getMessage() for r in caplog.records))


def test_modelscope_revisions_without_commit_ids(fake: FakeHub, tmp_path: Path) -> None:
    """ModelScope documents CommitId nowhere; if it stops sending it, say so (and pins work)."""
    commit = fake.add_repo("Qwen/Tiny", MODEL, branch="master")
    fake.ms_commit_ids = False
    with pytest.raises(HubError, match="did not say which commit it is at"):
        stage_hub(parse_hub_ref("modelscope://Qwen/Tiny"), tmp_path, token=None, endpoint=fake.url)
    pinned = parse_hub_ref(f"modelscope://Qwen/Tiny@{commit}")
    assert stage_hub(pinned, tmp_path, token=None, endpoint=fake.url)[1] == commit


def test_modelscope_download_continues_where_it_stopped(fake: FakeHub, tmp_path: Path) -> None:
    fake.add_repo("Qwen/Tiny", MODEL, branch="master")
    fake.cut("Qwen/Tiny", "model-00002-of-00002.safetensors", 700_000)
    folder, _ = stage_hub(
        parse_hub_ref("modelscope://Qwen/Tiny"), tmp_path, token=None, endpoint=fake.url
    )
    gets = fake.file_gets("Qwen/Tiny", "model-00002-of-00002.safetensors")
    assert [g.range for g in gets] == [None, "bytes=700000-"]
    assert_model(folder)


# The fake speaks the official client's protocol ---------------------------------------------


def test_the_fake_serves_huggingface_hub(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants, errors

    # No agent-registry fetch from huggingface.co, no token file: nothing beyond the fake.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    commit = fake.add_repo("org/model", MODEL)
    fake.add_repo("org/gated", MODEL, gated=True, token=TOKEN)
    api = hf_hub.HfApi(endpoint=fake.url, token=False)

    info = api.model_info("org/model", files_metadata=True)
    assert info.sha == commit
    assert {s.rfilename: s.size for s in info.siblings or []} == {
        k: len(v) for k, v in MODEL.items()
    }
    assert sorted(api.list_repo_files("org/model")) == sorted(MODEL)

    cache = tmp_path / "hf-cache"
    path = hf_hub.hf_hub_download(
        "org/model", "tokenizer.model", cache_dir=cache, endpoint=fake.url, token=False
    )
    assert Path(path).read_bytes() == MODEL["tokenizer.model"]
    snapshot = hf_hub.snapshot_download(
        "org/model",
        cache_dir=cache,
        endpoint=fake.url,
        token=False,
        allow_patterns=["*.json", "*.safetensors"],
    )
    assert Path(snapshot).name == commit
    assert (Path(snapshot) / "model-00001-of-00002.safetensors").read_bytes() == SHARD

    download = {"cache_dir": cache, "endpoint": fake.url}
    with pytest.raises(errors.GatedRepoError):
        hf_hub.hf_hub_download("org/gated", "config.json", token=False, **download)
    gated = hf_hub.hf_hub_download("org/gated", "config.json", token=TOKEN, **download)
    assert Path(gated).read_bytes() == MODEL["config.json"]
    with pytest.raises(errors.RepositoryNotFoundError):
        api.model_info("org/nothing")
    with pytest.raises(errors.RevisionNotFoundError):
        api.model_info("org/model", revision="v9")
    with pytest.raises(errors.RevisionNotFoundError):
        hf_hub.hf_hub_download("org/model", "config.json", revision="v9", token=False, **download)
    with pytest.raises(errors.EntryNotFoundError):
        hf_hub.hf_hub_download("org/model", "nothing.json", token=False, **download)
    authorized = {(s.method, s.path) for s in fake.requests if s.authorized}
    assert authorized == {(m, "/org/gated/resolve/main/config.json") for m in ("HEAD", "GET")}
    assert_token_nowhere(tmp_path)


def test_workers_hub_leaves_the_hf_home_alone(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_environment")
    fake.add_repo("org/model", MODEL)
    stage_hub(hf("hf://org/model"), tmp_path / "cache", token=None, endpoint=fake.url)
    assert not home.exists()
    assert not any(s.authorized for s in fake.requests)


def test_manifest_names_the_commit(fake: FakeHub, tmp_path: Path) -> None:
    commit = fake.add_repo("org/model", MODEL)
    folder, _ = stage_hub(hf("hf://org/model"), tmp_path, token=None, endpoint=fake.url)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source"] == {"uri": f"hf://org/model@{commit}", "endpoint": fake.url}
    assert manifest["objects"] == {name: {"size": len(MODEL[name])} for name in SERVED}
