from controlplane.services.secrets import REDACTED, keep_secrets, redact

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


def test_redacted_secret_for_a_new_path_is_dropped():
    new = redact(SPEC)
    new["storage"][0]["oss"]["path"] = "oss://b/other/"
    assert "access_key_secret" not in keep_secrets(new, SPEC)["storage"][0]["oss"]


def test_the_hub_token_is_kept_replaced_or_dropped_like_the_other_secrets():
    new = redact(SPEC)
    new["llm"]["hub_token"] = "hf_new"
    assert keep_secrets(new, SPEC)["llm"]["hub_token"] == "hf_new"
    first = {**redact(SPEC), "llm": {**redact(SPEC)["llm"]}}
    assert "hub_token" not in keep_secrets(first, {"name": "s"})["llm"]  # nothing stored
