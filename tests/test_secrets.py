import pytest

from controlplane.services.secrets import REDACTED, SecretsLostError, keep_secrets, redact

SPEC = {
    "name": "s",
    "storage": [
        {"mount_path": "/m", "oss": {"path": "oss://b/m/", "access_key_id": "id",
                                     "access_key_secret": "hunter2"}},
        {"mount_path": "/dev/shm", "empty_dir": {"medium": "memory"}},
    ],
    "llm": {"engine": "vllm-cpu", "model": "hf://org/private", "hub_token": "hf_secret"},
}  # fmt: skip


def test_redact_hides_every_secret_and_leaves_the_original_alone():
    shown = redact(SPEC)
    assert shown["storage"][0]["oss"]["access_key_secret"] == REDACTED
    assert shown["storage"][0]["oss"]["access_key_id"] == "id"
    assert shown["llm"]["hub_token"] == REDACTED
    assert SPEC["storage"][0]["oss"]["access_key_secret"] == "hunter2"
    assert "hf_secret" not in str(shown) and "hunter2" not in str(shown)


def test_putting_back_a_redacted_spec_keeps_the_stored_secret():
    assert keep_secrets(redact(SPEC), SPEC) == SPEC


def test_a_new_secret_replaces_the_stored_one():
    new = redact(SPEC)
    new["storage"][0]["oss"]["access_key_secret"] = "new"
    assert keep_secrets(new, SPEC)["storage"][0]["oss"]["access_key_secret"] == "new"


def test_a_storage_secret_follows_its_bucket_and_endpoint_not_its_prefix():
    new = redact(SPEC)
    new["storage"][0]["oss"]["path"] = "oss://b/other/"  # the same bucket
    assert keep_secrets(new, SPEC)["storage"][0]["oss"]["access_key_secret"] == "hunter2"
    for change in ({"path": "oss://evil/m/"}, {"endpoint": "https://evil.example"}):
        moved = redact(SPEC)
        moved["storage"][0]["oss"].update(change)
        with pytest.raises(SecretsLostError) as lost:
            keep_secrets(moved, SPEC)
        assert list(lost.value.errors) == ["storage[0].oss.access_key_secret"]


def test_the_hub_token_is_kept_replaced_or_asked_for_again():
    new = redact(SPEC)
    new["llm"]["hub_token"] = "hf_new"
    assert keep_secrets(new, SPEC)["llm"]["hub_token"] == "hf_new"
    pinned = redact(SPEC)
    pinned["llm"]["model"] = "hf://org/private@v2"  # another revision of the same repository
    assert keep_secrets(pinned, SPEC)["llm"]["hub_token"] == "hf_secret"
    other = redact(SPEC)
    other["llm"]["model"] = "hf://attacker/model"
    with pytest.raises(SecretsLostError) as lost:
        keep_secrets(other, SPEC)
    assert list(lost.value.errors) == ["llm.hub_token"]
    with pytest.raises(SecretsLostError) as lost:  # nothing stored to keep
        keep_secrets({"name": "s", "llm": {"hub_token": REDACTED}}, {"name": "s"})
    assert list(lost.value.errors) == ["llm.hub_token"]


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        ("registry.corp/team/vllm:1", "registry.corp/team/vllm:2", True),
        ("registry.corp/team/vllm:1", "evil.example/x:1", False),
        ("team/vllm:1", "evil.example/team/vllm:1", False),
        ("team/vllm:1", "other/vllm:1", True),  # both on Docker Hub
    ],
)
def test_docker_auth_follows_the_image_registry(before, after, kept):
    old = {"name": "s", "dockerAuth": "d2hhcmY6cHc=", "containers": [{"image": before}]}
    new = {**redact(old), "containers": [{"image": after}]}
    if kept:
        assert keep_secrets(new, old)["dockerAuth"] == old["dockerAuth"]
    else:
        with pytest.raises(SecretsLostError) as lost:
            keep_secrets(new, old)
        assert "registry changed" in lost.value.errors["dockerAuth"][0]
