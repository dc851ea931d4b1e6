"""workers/models/hub.py against tests/hub_fake.py, a fake Hugging Face Hub and ModelScope on
loopback, through their official clients (huggingface_hub; modelscope_hub,
workers/models/hub_modelscope.py).

"Downloaded once" and "nothing downloaded" are proven by the fake's request log, not by what the
client says it did. No database, no Redis, no network beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from modelscope_hub import HubConfig, _legacy_api
from modelscope_hub import _download as ms_download
from modelscope_hub import constants as ms_constants
from urllib3.util.retry import Retry

from contracts.hub_refs import HubRef, parse_hub_ref
from tests.hub_fake import FakeHub
from workers.models import hub as hubmod
from workers.models.hub import (
    HF_ENDPOINT,
    MANIFEST,
    MODELSCOPE_ENDPOINT,
    HubError,
    HubUnreachable,
    _size,
    resolve,
    serving_files,
    stage_hub,
)

TOKEN = "hf_SeCrEt_token_0123456789"
SHARD = os.urandom(3_000_000)
STAGED = {
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
}
NEVER_STAGED = {
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
MODEL = STAGED | NEVER_STAGED
SERVED = sorted(STAGED)
TOTAL = sum(len(MODEL[name]) for name in SERVED)


@pytest.fixture(autouse=True)
def no_waiting_and_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hubmod, "RETRY_DELAY", 0.0)
    monkeypatch.setattr(Retry, "get_backoff_time", lambda self: 0.0)  # modelscope_hub's waits
    monkeypatch.setattr(_legacy_api, "REPO_TREE_PAGE_RETRY_MAX_DELAY_SECONDS", 0)
    resolve_host = socket.getaddrinfo

    def loopback(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost"):  # the client's telemetry, say
            raise OSError(f"the test reached for {host}")
        return resolve_host(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback)


@pytest.fixture
def fake() -> Iterator[FakeHub]:
    with FakeHub() as hub:
        yield hub


hf = parse_hub_ref
SCHEMES = pytest.mark.parametrize("scheme", ["hf", "modelscope"])
ASKS = 1 + ms_download.DOWNLOAD_RETRY_TIMES  # GETs of a file by modelscope_hub, per call


def on(fake: FakeHub, scheme: str, files: dict[str, bytes] = MODEL) -> tuple[HubRef, str]:
    """org/model on the fake, one commit on the scheme's default branch: its reference, commit."""
    ref = parse_hub_ref(f"{scheme}://org/model")
    return ref, fake.add_repo("org/model", files, branch=ref.revision)


def assert_model(folder: Path, files: dict[str, bytes] = MODEL) -> None:
    staged = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != MANIFEST}
    assert staged == {name: files[name] for name in SERVED}


def assert_token_nowhere(root: Path, *texts: str) -> None:
    for text in texts:
        assert TOKEN not in text
    for path in root.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_references_parse_with_default_revisions() -> None:
    llama = HubRef("hf", "meta-llama/Llama-3.1-8B", "main")
    assert parse_hub_ref("hf://meta-llama/Llama-3.1-8B") == llama
    ms = HubRef("modelscope", "Qwen/Qwen2.5-7B-Instruct", "master")
    assert parse_hub_ref("modelscope://Qwen/Qwen2.5-7B-Instruct") == ms
    assert parse_hub_ref("hf://org/name@v1.0").revision == "v1.0"
    assert parse_hub_ref("hf://org/name@refs/pr/3").revision == "refs/pr/3"
    assert parse_hub_ref("hf://org/my_model.v2@" + "a" * 40).revision == "a" * 40
    assert parse_hub_ref("hf://org/name").name == "hf://org/name"
    assert HF_ENDPOINT == "https://huggingface.co"
    assert MODELSCOPE_ENDPOINT == "https://www.modelscope.cn"


MALFORMED = [
    *["org/name", "s3://org/name", "hf://name", "hf://org/name/extra", "hf://org/-name"],
    *["hf://org/name.", "hf://org/na--me", "hf://org/na..me", "hf://org/né", "hf://org/name@"],
    *["hf://org/name@a..b", "hf://org/name@branch/", "hf://org/name@-x"],
    *["hf://org/name@with space", "hf://" + "o" * 50 + "/" + "n" * 50],
]


@pytest.mark.parametrize("ref", MALFORMED)
def test_malformed_references_are_refused(ref: str) -> None:
    with pytest.raises(ValueError, match="expected|repository|branch or tag"):
        parse_hub_ref(ref)


def test_serving_files_prefer_one_weight_format() -> None:
    assert serving_files(MODEL) == SERVED
    bins = ["config.json", "pytorch_model.bin", "pytorch_model.bin.index.json", "training_args.bin"]
    assert serving_files(bins + ["model.pt", "README.md"]) == bins[:3]
    mistral = ["params.json", "consolidated.safetensors", "model.safetensors", "tekken.json"]
    assert serving_files(mistral) == ["model.safetensors", "params.json", "tekken.json"]
    alone = ["consolidated.safetensors", "params.json"]
    assert serving_files(alone) == alone
    lora = ["adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", "README.md"]
    assert serving_files(lora) == ["adapter_config.json", "adapter_model.safetensors"]
    pth = ["config.json", "model.pth"]
    assert serving_files([*pth, "scheduler.pt"]) == pth


# Staging (from both hubs, then from each) --------------------------------------------------


@SCHEMES
def test_a_pinned_commit_is_staged_once_and_reused(
    fake: FakeHub, tmp_path: Path, scheme: str
) -> None:
    branch, commit = on(fake, scheme)
    ref = hf(f"{branch.name}@{commit}")
    folder, got = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert (folder, got) == (tmp_path / scheme / "org" / "model" / commit, commit)
    assert_model(folder)
    assert sorted(s.file[1] for s in fake.downloads() if s.file) == SERVED
    assert {s.file[1] for s in fake.requests if s.file} == set(SERVED)  # HEADs too
    if scheme == "modelscope":  # the top level listed, the files fetched, at the commit
        asked = {(s.query["Revision"], s.query.get("Recursive")) for s in fake.requests if s.query}
        assert asked == {(commit, "False"), (commit, None)}
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source"] == {"uri": f"{branch.name}@{commit}", "endpoint": fake.url}
    assert manifest["objects"] == {name: {"size": len(MODEL[name])} for name in SERVED}
    before = len(fake.requests)
    assert stage_hub(ref, tmp_path, token=None, endpoint=fake.url) == (folder, commit)
    assert len(fake.requests) == before  # a complete pinned commit needs no request at all
    # The commit given as `commit=` is the same thing.
    assert stage_hub(branch, tmp_path, token=None, endpoint=fake.url, commit=commit)
    assert len(fake.requests) == before
    assert all(len(fake.file_gets("org/model", name)) == 1 for name in SERVED)


@SCHEMES
def test_a_branch_or_tag_resolves_to_its_commit_and_a_new_commit_to_a_new_folder(
    fake: FakeHub, tmp_path: Path, scheme: str
) -> None:
    ref, first = on(fake, scheme)
    assert resolve(ref, None, fake.url) == first
    folder, commit = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert commit == first and folder.name == first
    downloads = len(fake.downloads())
    assert stage_hub(ref, tmp_path, token=None, endpoint=fake.url) == (folder, first)
    assert len(fake.downloads()) == downloads  # resolved again, downloaded nothing

    changed = MODEL | {"config.json": b'{"model_type": "llama", "changed": true}'}
    second = fake.commit("org/model", changed, branch=ref.revision)
    assert resolve(ref, None, fake.url) == second
    new_folder, commit = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert commit == second and new_folder.name == second
    assert_model(new_folder, changed)
    assert_model(folder)  # the old commit's folder stays as it was
    fake.tag("org/model", "v1.0", first)  # a tag, of the first commit
    tag = hf(f"{ref.name}@v1.0")
    assert resolve(tag, None, fake.url) == first
    downloads = len(fake.downloads())
    assert stage_hub(tag, tmp_path, token=None, endpoint=fake.url) == (folder, first)
    assert len(fake.downloads()) == downloads


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
    said = f"hf://org/private: no such repository on {fake.url}, or it is private and no token"
    assert str(caught.value) == f"{said} was given"
    folder, _ = stage_hub(hf("hf://org/private"), tmp_path, token=TOKEN, endpoint=fake.url)
    assert_model(folder)
    assert_token_nowhere(tmp_path, str(caught.value))


def test_an_unreachable_hub_is_worth_trying_again(tmp_path: Path) -> None:
    with FakeHub() as gone:
        url = gone.url
    for ref in ("hf://org/model", "modelscope://Qwen/Tiny"):
        with pytest.raises(HubUnreachable, match=f"^cannot reach {url}: "):
            stage_hub(parse_hub_ref(ref), tmp_path, token=TOKEN, endpoint=url)
        with pytest.raises(HubUnreachable, match=f"^cannot reach {url}: "):
            resolve(parse_hub_ref(ref), None, url)


@SCHEMES
def test_an_api_in_trouble_is_asked_again_then_unreachable(
    fake: FakeHub, tmp_path: Path, scheme: str
) -> None:
    """API_ATTEMPTS times; modelscope_hub also asks API_MAX_RETRIES more times itself."""
    ref, commit = on(fake, scheme)
    asks = 1 if scheme == "hf" else 1 + ms_constants.API_MAX_RETRIES
    fake.api_outage(*[503] * (hubmod.API_ATTEMPTS - 1) * asks)
    assert resolve(ref, None, fake.url) == commit
    fake.api_outage(*[502] * hubmod.API_ATTEMPTS * asks)
    with pytest.raises(HubUnreachable, match=r"^cannot reach .*HTTP 502"):
        stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert not fake.downloads()


@SCHEMES
def test_what_needs_a_change_is_a_hub_error_said_at_once(
    fake: FakeHub, tmp_path: Path, caplog: pytest.LogCaptureFixture, scheme: str
) -> None:
    """A missing repository or revision, no access (ModelScope: a private repository), no
    weights: a plain HubError (not HubUnreachable) that names the problem, after one request of
    each (no retries), and never holds the token."""
    caplog.set_level(logging.DEBUG)
    ref, _ = on(fake, scheme)
    secret = {"gated": scheme == "hf", "private": scheme == "modelscope"}
    fake.add_repo("org/gated", MODEL, branch=ref.revision, token=TOKEN, **secret)
    fake.add_repo("org/gguf", {"config.json": b"{}", "m-Q4_K_M.gguf": b"GGUF"}, branch=ref.revision)
    messages = []
    for repo, token, message in [
        ("org/nothing", None, rf"^{scheme}://org/nothing: no such repository on http://.*no token"),
        ("org/model@v9", None, rf"^{scheme}://org/model: has no revision 'v9' on http://"),
        (f"org/model@{'b' * 40}", None, f"has no revision '{'b' * 40}'"),
        ("org/gated", None, r"needs an access token \(llm.hub_token\) with access: none"),
        ("org/gated", "hf_wrong", "refused or lacks access"),
        ("org/gguf", None, "no model weights at the repository's top"),
    ]:
        fake.requests.clear()
        with pytest.raises(HubError, match=message) as caught:
            stage_hub(hf(f"{scheme}://{repo}"), tmp_path, token=token, endpoint=fake.url)
        assert not isinstance(caught.value, HubUnreachable), caught.value
        asked = [(s.method, s.path) for s in fake.requests]
        assert asked and len(set(asked)) == len(asked)
        messages.append("".join(traceback.format_exception(caught.value)))
    with pytest.raises(HubError, match="has no revision 'v9'"):
        resolve(hf(f"{scheme}://org/model@v9"), TOKEN, fake.url)
    assert not list(tmp_path.rglob("*.safetensors"))  # no weights came
    assert_token_nowhere(tmp_path, *messages, *(r.getMessage() for r in caplog.records))


@SCHEMES
def test_a_dropped_download_continues_within_the_call(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """With a Range request: hf_hub_download from its last whole chunk (10 MiB; 256 KiB here),
    modelscope_hub from its last byte."""
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 256 * 1024)
    ref, _ = on(fake, scheme)
    shard = "model-00001-of-00002.safetensors"
    fake.cut("org/model", shard, 1_000_000)
    folder, _ = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    again = "bytes=786432-" if scheme == "hf" else "bytes=1000000-"
    assert [g.range for g in fake.file_gets("org/model", shard)] == [None, again]
    assert_model(folder)


@SCHEMES
def test_a_stage_that_gave_up_keeps_what_it_fetched(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """The next stage asks nothing about the files the last one finished (modelscope_hub checks
    their size and sha256 on disk); the one it gave up on, Hugging Face starts again, ModelScope
    continues from its last byte (`<file>.incomplete`)."""
    monkeypatch.setattr(hubmod, "DOWNLOAD_ATTEMPTS", 2 if scheme == "hf" else 1)
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 100_000)
    ref, commit = on(fake, scheme)
    shard = "model-00001-of-00002.safetensors"
    fake.cut("org/model", shard, 1_000_000)
    # After the cut, the Range request, then again (ModelScope: the client's asks left).
    fake.outage("org/model", shard, *[503] * (2 if scheme == "hf" else ASKS - 1))
    with pytest.raises(HubUnreachable, match=f"^cannot reach .*{shard} of {ref.name}.*503"):
        stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert not (tmp_path / scheme / "org" / "model" / commit).exists()
    partial = tmp_path / scheme / "org" / "model" / f".{commit}.partial" / f"{shard}.incomplete"
    assert _size(partial) == (0 if scheme == "hf" else 1_000_000)
    first = {name: len(fake.file_gets("org/model", name)) for name in SERVED}
    assert first["config.json"] == 1  # finished before the shard failed (results come in order)

    asked = len(fake.requests)
    folder, _ = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    resumed = "bytes=1000000-"
    ranges = [None, resumed, None, None] if scheme == "hf" else [None] + [resumed] * ASKS
    assert [g.range for g in fake.file_gets("org/model", shard)] == ranges
    again = {s.file[1] for s in fake.requests[asked:] if s.file}
    assert again == {name for name in SERVED if first[name] == 0} | {shard}
    assert_model(folder)
    assert not list(folder.parent.glob(".*.partial")) and not list(folder.rglob("*incomplete"))


@SCHEMES
def test_a_hub_in_trouble_is_asked_again(fake: FakeHub, tmp_path: Path, scheme: str) -> None:
    """DOWNLOAD_ATTEMPTS times; modelscope_hub also asks ASKS times itself each time."""
    ref, _ = on(fake, scheme)
    fake.outage("org/model", "config.json", 503, 502)
    fake.outage("org/model", "tokenizer.json", 429)
    folder, _ = stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    assert_model(folder)
    assert len(fake.file_gets("org/model", "config.json")) == 3
    assert len(fake.file_gets("org/model", "tokenizer.json")) == 2
    asks = hubmod.DOWNLOAD_ATTEMPTS * (1 if scheme == "hf" else ASKS)
    fake.outage("org/model", "config.json", *[503] * asks)
    with pytest.raises(
        HubUnreachable, match=rf"^cannot reach .*config.json of {ref.name} \(HTTP 503\)"
    ):
        stage_hub(ref, tmp_path / "other", token=None, endpoint=fake.url)
    assert len(fake.file_gets("org/model", "config.json")) == 3 + asks


@SCHEMES
def test_a_damaged_folder_is_staged_again(fake: FakeHub, tmp_path: Path, scheme: str) -> None:
    ref, commit = on(fake, scheme)
    pinned = hf(f"{ref.name}@{commit}")
    folder, _ = stage_hub(pinned, tmp_path, token=None, endpoint=fake.url)
    (folder / "tokenizer.json").unlink()
    (folder / "config.json").write_bytes(b"{}")
    assert stage_hub(pinned, tmp_path, token=None, endpoint=fake.url)
    assert_model(folder)
    assert len(fake.file_gets("org/model", "tokenizer.json")) == 2


@SCHEMES
def test_progress_reaches_the_total(fake: FakeHub, tmp_path: Path, scheme: str) -> None:
    ref, commit = on(fake, scheme)
    calls: list[tuple[int, int]] = []  # appended to from download threads
    given = {"token": None, "endpoint": fake.url, "progress": lambda *c: calls.append(c)}
    stage_hub(ref, tmp_path, **given)
    assert len(calls) >= 3 and calls[-1] == (TOTAL, TOTAL)
    assert all(total == TOTAL and 0 <= done <= TOTAL for done, total in calls)
    calls.clear()
    stage_hub(hf(f"{ref.name}@{commit}"), tmp_path, **given)
    assert calls == [(TOTAL, TOTAL)]


@SCHEMES
def test_concurrent_stagings_of_one_commit_download_once(
    fake: FakeHub, tmp_path: Path, scheme: str
) -> None:
    ref, _ = on(fake, scheme)
    with ThreadPoolExecutor(3) as pool:
        runs = [pool.submit(stage_hub, ref, tmp_path, token=None, endpoint=fake.url) for _ in "abc"]
        results = {run.result() for run in runs}
    assert len(results) == 1
    assert_model(results.pop()[0])
    assert all(len(fake.file_gets("org/model", name)) == 1 for name in SERVED)


@SCHEMES
def test_the_token_is_not_sent_to_a_cdn(tmp_path: Path, scheme: str) -> None:
    with FakeHub(cdn=True) as fake:
        ref = parse_hub_ref(f"{scheme}://org/gated")
        fake.add_repo("org/gated", MODEL, branch=ref.revision, gated=True, token=TOKEN)
        folder, _ = stage_hub(ref, tmp_path, token=TOKEN, endpoint=fake.url)
    assert_model(folder)
    cdn = [s for s in fake.requests if s.path.startswith("/cdn/")]
    assert len(cdn) == 2 and not any(s.authorized or s.cookie for s in cdn)
    assert all(s.authorized or s.cookie for s in fake.requests if not s.path.startswith("/cdn/"))


def test_modelscope_revisions_without_commit_ids(fake: FakeHub, tmp_path: Path) -> None:
    """ModelScope documents CommitId nowhere; if it stops sending it, say so (and pins work)."""
    ref, commit = on(fake, "modelscope")
    fake.ms_commit_ids = False
    with pytest.raises(HubError, match="did not say which commit it is at"):
        stage_hub(ref, tmp_path, token=None, endpoint=fake.url)
    pinned = hf(f"{ref.name}@{commit}")
    assert stage_hub(pinned, tmp_path, token=None, endpoint=fake.url)[1] == commit


def test_modelscope_leaves_the_home_alone(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """No token from MODELSCOPE_API_TOKEN or a stored login (`modelscope login`), no endpoint
    from the environment, nothing written under its home or cache; no progress bar on stderr."""
    home, cache = tmp_path / "home" / ".modelscope", tmp_path / "home" / ".cache"
    HubConfig(fake.url, cache_dir=cache, config_dir=home, token="").save_token("ms_stored_token")
    stored = sorted(home.parent.rglob("*"))
    env = {"HOME": home.parent, "MODELSCOPE_HOME": home, "MODELSCOPE_CACHE": cache}
    env |= {"MODELSCOPE_API_TOKEN": "ms_env_token", "MODELSCOPE_ENDPOINT": "http://x.invalid"}
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    ref, _ = on(fake, "modelscope")
    folder, _ = stage_hub(ref, tmp_path / "cache", token=None, endpoint=fake.url)
    assert sorted(home.parent.rglob("*")) == stored
    assert fake.requests and not any(s.authorized or s.cookie for s in fake.requests)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*SERVED, MANIFEST])
    assert not capsys.readouterr().err


def test_the_fake_serves_huggingface_hub(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake speaks the official client's protocol, also where workers.models.hub does not use
    it: listings, the client's own cache, snapshots."""
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    commit = fake.add_repo("org/model", MODEL)
    fake.add_repo("org/gated", MODEL, gated=True, token=TOKEN)
    listed = HfApi(endpoint=fake.url, token=False).list_repo_files("org/model")
    assert sorted(listed) == sorted(MODEL)
    download = {"cache_dir": tmp_path / "hf-cache", "endpoint": fake.url}
    path = hf_hub_download("org/model", "tokenizer.model", token=False, **download)
    assert Path(path).read_bytes() == MODEL["tokenizer.model"]
    patterns = ["*.json", "*.safetensors"]
    snapshot = snapshot_download("org/model", token=False, allow_patterns=patterns, **download)
    assert Path(snapshot).name == commit
    assert (Path(snapshot) / "model-00001-of-00002.safetensors").read_bytes() == SHARD
    gated = hf_hub_download("org/gated", "config.json", token=TOKEN, **download)
    assert Path(gated).read_bytes() == MODEL["config.json"]
    with pytest.raises(hf_errors.EntryNotFoundError):
        hf_hub_download("org/model", "nothing.json", token=False, **download)
    authorized = {(s.method, s.path) for s in fake.requests if s.authorized}
    assert authorized == {(m, "/org/gated/resolve/main/config.json") for m in ("HEAD", "GET")}
    assert_token_nowhere(tmp_path)


def test_workers_hub_leaves_the_hf_home_alone(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token from HF_TOKEN or a token file, nothing read or written under HF_HOME (the hub
    cache, Xet's, the telemetry registry); the folder holds the model and the manifest only."""
    home = tmp_path / "hf-home"
    for name in ("HF_HOME", "HF_HUB_CACHE", "HF_XET_CACHE", "AGENT_HARNESSES_PATH"):
        monkeypatch.setattr(hf_constants, name, str(home / name))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    (tmp_path / "token").write_text("hf_from_a_token_file")
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_environment")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fake.add_repo("org/model", MODEL)
    folder, _ = stage_hub(hf("hf://org/model"), tmp_path / "cache", token=None, endpoint=fake.url)
    assert not home.exists() and not (tmp_path / "home").exists()
    assert fake.requests and not any(s.authorized for s in fake.requests)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*SERVED, MANIFEST])
    assert hf_constants.HF_HUB_DISABLE_TELEMETRY and hf_constants.HF_HUB_DISABLE_XET
