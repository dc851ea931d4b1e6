"""`python -m workers.models.stage`, the init container of a Kubernetes pod, against a real S3
server (moto's, tests/moto_support.py): it fills the folder it is given with the nodes' staging
code, credentials from the environment, and needs no database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from contracts.object_store import MANIFEST
from tests.hub_fake import FakeHub
from tests.hub_models import tiny_files
from tests.moto_support import KEY_ID, SECRET, Moto

ROOT = Path(__file__).resolve().parents[1]
MODEL = {
    "config.json": b'{"model_type": "llama"}',
    "model.safetensors": os.urandom(200_000),
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}


def bucket_with(s3: Any, files: dict[str, bytes]) -> str:
    name = f"stage-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    for rel, body in files.items():
        s3.put_object(Bucket=name, Key=f"models/m/{rel}", Body=body)
    return name


def stage(moto: Moto, uri: str, into: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHARF_", "DJANGO_", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), WHARF_S3_ACCESS_KEY_ID=KEY_ID,
               WHARF_S3_ACCESS_KEY_SECRET=SECRET)  # fmt: skip
    command = [sys.executable, "-m", "workers.models.stage", "--into", str(into)]
    return subprocess.run(
        [*command, "--endpoint", moto.url, uri],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != MANIFEST
    }


def test_stages_a_folder_into_the_folder_it_is_given(moto, s3, tmp_path):
    bucket = bucket_with(s3, MODEL)
    done = stage(moto, f"s3://{bucket}/models/m/", tmp_path / "0")
    assert done.returncode == 0, done.stderr
    assert tree(tmp_path / "0") == MODEL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0"]  # its cache is gone
    assert "100% of 0.00 GB" in done.stdout and f"into {tmp_path / '0'}" in done.stdout
    assert SECRET not in done.stdout + done.stderr


def test_a_second_run_in_the_same_pod_downloads_only_what_changed(moto, s3, tmp_path):
    bucket = bucket_with(s3, MODEL)
    uri = f"s3://{bucket}/models/m/"
    assert stage(moto, uri, tmp_path / "0").returncode == 0
    with moto.record() as unchanged:
        assert stage(moto, uri, tmp_path / "0").returncode == 0
    assert unchanged.object_gets(bucket) == []
    assert tree(tmp_path / "0") == MODEL
    s3.put_object(Bucket=bucket, Key="models/m/config.json", Body=b'{"model_type": "qwen2"}')
    with moto.record() as changed:
        assert stage(moto, uri, tmp_path / "0").returncode == 0
    assert [r["url"].rsplit("/", 1)[-1] for r in changed.object_gets(bucket)] == ["config.json"]
    assert tree(tmp_path / "0") == {**MODEL, "config.json": b'{"model_type": "qwen2"}'}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0"]


def test_a_failure_says_what_to_fix_and_leaves_no_folder(moto, tmp_path):
    done = stage(moto, "s3://no-such-bucket-here/models/m/", tmp_path / "0")
    assert done.returncode == 1
    assert "no-such-bucket-here" in done.stderr and "does not exist" in done.stderr
    assert not (tmp_path / "0").exists()
    assert SECRET not in done.stdout + done.stderr


def test_stages_a_hub_model_at_the_commit_it_is_given(tmp_path):
    token = "hf_stage_cli_secret"
    with FakeHub() as fake:
        first = fake.add_repo("wharf/tiny", tiny_files(), private=True, token=token)
        fake.commit("wharf/tiny", {**tiny_files(), "config.json": b"{}"})  # main moves on

        def run(ref: str, into: Path, *extra: str) -> subprocess.CompletedProcess:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("WHARF_", "HF_"))}
            env.update(PYTHONPATH=str(ROOT), WHARF_HUB_TOKEN=token, WHARF_HF_ENDPOINT=fake.url)
            return subprocess.run(
                [sys.executable, "-m", "workers.models.stage", "--into", str(into), *extra, ref],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip

        done = run("hf://wharf/tiny", tmp_path / "0", "--commit", first)
        assert done.returncode == 0, done.stderr
        assert tree(tmp_path / "0") == tiny_files()  # the commit given, not where main is now
        assert sorted(p.name for p in tmp_path.iterdir()) == ["0"]  # its hub cache is gone
        assert "100%" in done.stdout and token not in done.stdout + done.stderr
        missing = run("hf://wharf/missing", tmp_path / "1")
        assert missing.returncode == 1 and "no such repository" in missing.stderr
        assert token not in missing.stdout + missing.stderr
