"""storage[] as EAS writes it (contracts.spec_storage): the corpus's storage entries validate,
git, image and an object store's readOnly are checked by name, rendered as the mounts the
node makes, refused where a runtime cannot make them or a workspace is not granted them, and
a git password is a secret like the others. Pure: no servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.eas import normalise
from contracts.engines import render
from contracts.engines.plan import Mount, Placement
from contracts.grants import git_refusal, parse_grants, refusals
from contracts.spec import REDACTED, SpecError, parse_spec
from contracts.spec_rules import runtime_checks
from controlplane.services.secrets import SecretsLostError, keep_secrets, redact

CORPUS = Path(__file__).parent / "eas_corpus"
# The corpus files with storage entries that the storage brief covers, by number.
STORAGE_FILES = ["06", "07", "09", "11", "12", "13", "15", "16", "17", "19", "23",
                 "39", "40", "41", "42", "43", "44", "45"]  # fmt: skip
BASE = {"name": "svc", "containers": [{"image": "busybox", "command": "sleep 1d", "port": 8001}]}
GIT = {"repo": "https://git.example.com/team/code.git", "branch": "main", "commit": "abc123",
       "username": "me", "password": "s3cret-token"}  # fmt: skip


def spec(*entries: dict, **more) -> dict:
    return {**BASE, "storage": list(entries), **more}


def corpus_storage(number: str) -> list:
    (path,) = CORPUS.glob(f"{number}-*.json")
    return json.loads(path.read_text())["storage"]


@pytest.mark.parametrize("number", STORAGE_FILES)
def test_every_published_storage_entry_validates(number):
    for entry in corpus_storage(number):  # one by one: 19 mounts two at the same path
        parse_spec(normalise(spec(entry)))


@pytest.mark.parametrize(("entry", "field"), [
    ({"git": {"repo": "ssh://git@host/x.git"}}, "storage[0].git.repo"),
    ({"git": {"repo": "https://me:pw@host/x.git"}}, "storage[0].git.repo"),
    ({"git": {"repo": "file://host/x"}}, "storage[0].git.repo"),
    ({"git": {"repo": "https://host/x.git", "branch": "--upload-pack=evil"}},
     "storage[0].git.branch"),
    ({"git": {"repo": "https://host/x.git", "commit": "-c"}}, "storage[0].git.commit"),
    ({"git": {"repo": "https://host/x.git", "depth": 1}}, "storage[0].git.depth"),
    ({"image": {"image": "reg/x:1", "path": "relative/dir"}}, "storage[0].image.path"),
    ({"image": {"image": "reg/x:1", "path": "/a/../etc"}}, "storage[0].image.path"),
    ({"image": {"image": "two words", "path": "/a"}}, "storage[0].image.image"),
    ({"image": {"image": "reg/x:1"}}, "storage[0].image.path"),
    ({"oss": {"path": "oss://bucket/p/", "readOnly": "maybe"}}, "storage[0].oss.readOnly"),
    ({"oss": {"path": "oss://bucket/p/", "read_only": True}}, "storage[0].oss.read_only"),
])  # fmt: skip
def test_a_bad_storage_field_is_named(entry, field):
    with pytest.raises(SpecError) as caught:
        parse_spec(normalise(spec({"mount_path": "/m", **entry})))
    assert field in caught.value.errors, caught.value.errors


def test_eas_string_booleans_are_read_only_flags():
    parsed = parse_spec(normalise(spec(
        {"mount_path": "/m", "oss": {"path": "oss://bucket/p/", "readOnly": "false"}},
        {"mount_path": "/n", "nfs": {"server": "nas", "path": "/", "readOnly": "true"}},
    )))  # fmt: skip
    assert parsed.storage[0].oss.readOnly is False
    assert parsed.storage[1].nfs.readOnly is True


def test_each_node_made_folder_is_bind_mounted_as_its_entry_says():
    parsed = parse_spec(spec(
        {"mount_path": "/code", "git": GIT},
        {"mount_path": "/assets", "image": {"image": "reg.example/x:1", "path": "/opt/assets"}},
        {"mount_path": "/out", "s3": {"path": "s3://bucket/out/", "readOnly": False}},
        {"mount_path": "/in", "s3": {"path": "s3://bucket/in/", "readOnly": True}},
        {"mount_path": "/nas", "nfs": {"server": "nas", "path": "/x", "readOnly": True}},
    ))  # fmt: skip
    staged = {"storage[0].git": "/c/git", "storage[1].image": "/c/image",
              "storage[2].writable": "/w/out", "s3://bucket/in/": "/c/in"}  # fmt: skip
    mounts = render(parsed, Placement(staged=staged)).mounts
    assert Mount("bind", "/code", "/c/git", read_only=True) in mounts
    assert Mount("bind", "/assets", "/c/image", read_only=True) in mounts
    assert Mount("bind", "/out", "/w/out", read_only=False) in mounts
    assert Mount("bind", "/in", "/c/in", read_only=True) in mounts
    assert Mount("nfs", "/nas", "nas:/x", read_only=True) in mounts


@pytest.mark.parametrize(("entry", "field"), [
    ({"git": GIT}, "storage[0].git"),
    ({"image": {"image": "reg/x:1", "path": "/a"}}, "storage[0].image"),
    ({"oss": {"path": "oss://bucket/p/", "readOnly": False}}, "storage[0].oss.readOnly"),
])  # fmt: skip
@pytest.mark.parametrize("runtime", ["kubernetes", "process"])
def test_a_runtime_that_cannot_make_a_mount_refuses_it_by_name(entry, field, runtime):
    errors = runtime_checks(parse_spec(spec({"mount_path": "/m", **entry})), runtime)
    assert list(errors) == [field]
    assert runtime_checks(parse_spec(spec({"mount_path": "/m", **entry})), "docker") == {}


def test_a_read_only_or_unset_object_store_needs_no_node_copy():
    for read_only in ({"readOnly": True}, {}):
        entry = {"mount_path": "/m", "oss": {"path": "oss://bucket/p/", **read_only}}
        assert runtime_checks(parse_spec(spec(entry)), "kubernetes") == {}


GRANTS = {"git_repositories": ["file:///srv/git", "git://127.0.0.1:9418"]}


@pytest.mark.parametrize(("repo", "refused"), [
    ("https://github.com/org/repo.git", None),
    ("file:///srv/git/team/repo.git", None),
    ("file:///srv/gitother/repo.git", "a folder of the node"),
    ("file:///etc", "a folder of the node"),
    ("git://127.0.0.1:9418/repo.git", None),
    ("git://127.0.0.1:9419/repo.git", "local address"),
    ("https://localhost/repo.git", "local address"),
    ("http://10.1.2.3/repo.git", "local address"),
    ("https://[::1]/repo.git", "local address"),
])  # fmt: skip
def test_git_servers_at_local_addresses_and_node_folders_need_a_grant(repo, refused):
    why = git_refusal(repo, parse_grants(GRANTS))
    assert (why is None) if refused is None else (refused in why)


def test_an_ungranted_git_repo_is_refused_naming_the_field_and_grant():
    parsed = parse_spec(spec({"mount_path": "/m", "git": {"repo": "file:///srv/git/r"}}))
    found = refusals(parsed, parse_grants({}), "team", "docker")
    assert list(found) == ["storage[0].git.repo"]
    assert "grants.git_repositories" in found["storage[0].git.repo"][0]
    assert refusals(parsed, parse_grants(GRANTS), "team", "docker") == {}


def test_an_image_mount_from_a_local_registry_needs_the_registries_grant():
    entry = {"mount_path": "/m", "image": {"image": "127.0.0.1:5000/x:1", "path": "/a"}}
    parsed = parse_spec(spec(entry))
    found = refusals(parsed, parse_grants({}), "team", "docker")
    assert list(found) == ["storage[0].image.image"]
    assert refusals(parsed, parse_grants({"registries": ["127.0.0.1:5000"]}), "team", "") == {}


def test_a_bad_git_grant_is_named():
    with pytest.raises(Exception, match="git server"):
        parse_grants({"git_repositories": ["ssh://host"]})


def test_a_git_password_is_masked_and_kept_while_its_repository_is_the_same():
    stored = spec({"mount_path": "/m", "git": GIT})
    shown = redact(stored)
    assert shown["storage"][0]["git"]["password"] == REDACTED
    assert shown["storage"][0]["git"]["username"] == "me"
    assert GIT["password"] not in json.dumps(shown)
    assert keep_secrets(shown, stored)["storage"][0]["git"]["password"] == GIT["password"]
    elsewhere = {**shown["storage"][0]["git"], "repo": "https://elsewhere.example/x.git"}
    moved = spec({"mount_path": "/m", "git": elsewhere})
    with pytest.raises(SecretsLostError) as caught:
        keep_secrets(moved, stored)
    assert list(caught.value.errors) == ["storage[0].git.password"]


def test_a_spec_without_the_new_fields_hashes_as_before():
    # The hash of this spec before git, image and readOnly existed (commit 0632eb6).
    entry = {"mount_path": "/m", "oss": {"path": "oss://bb/p/"}}
    before = parse_spec(spec(entry, {"mount_path": "/d", "empty_dir": {}})).spec_hash()
    assert before == "a83b765d1807"
    writable = {"mount_path": "/m", "oss": {"path": "oss://bb/p/", "readOnly": False}}
    assert parse_spec(spec(writable)).spec_hash() != parse_spec(spec(entry)).spec_hash()


@pytest.mark.parametrize(("read_only", "options"), [(True, "addr=nas.example,ro"),
                                                     (False, "addr=nas.example")])  # fmt: skip
def test_an_nfs_entrys_read_only_reaches_dockers_volume_and_mount(read_only, options, tmp_path):
    from workers.runtimes.base import InstanceRequest
    from workers.runtimes.docker import run_options

    entry = {"mount_path": "/nas", "nfs": {"server": "nas.example", "path": "/x",
                                           "readOnly": read_only}}  # fmt: skip
    request = InstanceRequest("svc", "svc-1", "h", render(parse_spec(spec(entry))), "")
    (mount,) = run_options(request, model_dir=str(tmp_path), bind_address="127.0.0.1")["mounts"]
    assert mount["ReadOnly"] is read_only
    assert mount["VolumeOptions"]["DriverConfig"]["Options"]["o"] == options
