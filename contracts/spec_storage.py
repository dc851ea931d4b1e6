"""The spec's `storage[]` entries: what an instance mounts, as EAS spells it (its mount-storage
page, ../shared/eas/PARAMETERS.md §5), plus Kubernetes' PersistentVolumeClaims. Pure.

Every entry has `mount_path` and exactly one source:
- `oss` / `obs` / `s3`: a bucket prefix, staged into the node's cache; `readOnly: false` makes
  each instance a writable copy whose new and changed files go back to the prefix
  (workers.models.writable_storage);
- `nfs`: an export, mounted by the node (`readOnly`, EAS's spelling);
- `git`: a repository cloned on the node at instance start, read-only (workers.models.git_mounts);
- `image`: a folder copied out of an image on the node, read-only (workers.models.image_mounts);
- `empty_dir`: scratch space, on disk or (`medium: memory`) in memory;
- `pvc`: a PersistentVolumeClaim (Kubernetes only);
- `dataset`: a PAI dataset, which on Wharf is a volume the operator made and filled, named
  `wharf-dataset-<id>-<version>`: a Docker named volume on the node, a PersistentVolumeClaim
  on Kubernetes (`Dataset.volume`); read-only unless `read_only` is false.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from contracts.spec_cloud import STORAGE
from contracts.spec_fleet import _Strict
from contracts.spec_models import OBJECT_STORAGE_SCHEMES

# A Kubernetes object name (DNS-1123 subdomain), as PersistentVolumeClaims are named.
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A branch, tag or commit as git's command line takes it: never an option ('-…').
GIT_REF = r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,254}$"
GIT_SCHEMES = ("https", "http", "git", "file")
STORAGE_SOURCES = ("empty_dir", "oss", "obs", "s3", "nfs", "pvc", "git", "image", "dataset")
# A dataset's id and version as they name its volume (a Docker volume and a Kubernetes claim).
DATASET_WORD = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DATASET_PREFIX = "wharf-dataset-"
# The Mount kind (contracts.engines.plan) of a dataset: Docker mounts the named volume if it
# exists, Kubernetes the claim.
DATASET_MOUNT = "dataset"
READ_ONLY = (
    "false: each instance gets a writable copy of the prefix, and the files it adds or "
    "changes are uploaded back to it (every WHARF_STORAGE_SYNC_SECONDS and when the instance "
    "stops; deletions are not); true or unset: a read-only copy."
)


def node_folder(index: int, source: str) -> str:
    """How Placement.staged names the node's folder for storage entry `index` where it is
    the instance's own (a clone, an image's folder, a writable copy) rather than a cached
    copy of a bucket (named by its URI): `storage[2].git`."""
    return f"storage[{index}].{source}"


class EmptyDir(_Strict):
    medium: Literal["", "memory"] = ""
    size_limit: int | None = Field(default=None, gt=0, le=4096, description="GB")


class ObjectStorage(_Strict):
    path: str
    endpoint: str | None = None
    # Optional per-entry credentials; else WHARF_<SCHEME>_ACCESS_KEY_ID/_SECRET from the
    # worker's environment. The secret is never echoed by the API (see REDACTED).
    access_key_id: str | None = None
    access_key_secret: str | None = None
    readOnly: bool | None = Field(default=None, description=READ_ONLY)  # noqa: N815 (EAS)


class Nfs(_Strict):
    server: str = Field(min_length=1, max_length=253)
    path: str = Field(min_length=1)
    readOnly: bool = False  # noqa: N815 (EAS spelling)


class Pvc(_Strict):
    """A PersistentVolumeClaim in Wharf's namespace; only WHARF_RUNTIME=kubernetes mounts one."""

    claim_name: str = Field(
        max_length=253, pattern=K8S_NAME,
        description="The claim's name, in the namespace Wharf runs services in.",
    )  # fmt: skip
    read_only: bool = True


class GitRepository(_Strict):
    """A repository cloned on the node when an instance starts, mounted read-only (EAS: "restart
    to refresh"). The password (or access token) is a secret: sealed, never echoed or logged."""

    repo: str = Field(
        max_length=2048,
        description="https://, http:// or git:// URL (file:// and local addresses need the "
        "workspace's git_repositories grant).",
    )
    branch: str | None = Field(
        default=None, max_length=255, pattern=GIT_REF,
        description="The branch to clone; unset: the repository's default branch.",
    )  # fmt: skip
    commit: str | None = Field(
        default=None, max_length=255, pattern=GIT_REF,
        description="The commit (or tag) to check out; unset: the branch's newest.",
    )  # fmt: skip
    username: str | None = Field(default=None, max_length=256)
    password: str | None = Field(default=None, max_length=4096, description="or access token")

    @field_validator("repo")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in GIT_SCHEMES or not (parts.netloc or parts.scheme == "file"):
            raise ValueError("repo must be an https://, http://, git:// or file:// URL")
        if parts.username or parts.password:
            raise ValueError("give the credentials as username and password, not in the URL")
        if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
            raise ValueError("a file:// repo is file:///absolute/path on the node")
        if parts.query or parts.fragment or any(c.isspace() for c in value):
            raise ValueError("repo is a plain URL: no spaces, query or fragment")
        return value


class ImageFolder(_Strict):
    """A folder copied out of an image on the node, mounted read-only (EAS's `image` mount).
    The image is pulled like the engine's, with the spec's dockerAuth."""

    image: str = Field(min_length=1, max_length=512, description="registry/name:tag")
    path: str = Field(min_length=1, max_length=4096, description="A folder in the image.")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if any(c.isspace() for c in value) or value.startswith("-"):
            raise ValueError("an image reference is one word, e.g. registry/name:tag")
        return value

    @field_validator("path")
    @classmethod
    def _folder(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError("path is an absolute folder in the image, without '..'")
        return value


class Dataset(_Strict):
    """EAS's PAI dataset, as a volume the operator fills (PAI keeps datasets in OSS; Wharf
    has no dataset registry): see `volume`. The workspace needs the datasets grant."""

    id: str = Field(
        max_length=63, json_schema_extra={"pattern": DATASET_WORD},
        description="The dataset, e.g. d-4rb4dkdp1bq3s5u2qu.",
    )  # fmt: skip
    version: str = Field(default="v1", max_length=32, json_schema_extra={"pattern": DATASET_WORD})
    read_only: bool = Field(default=True, description="false: mounted writable.")

    @field_validator("id", "version")
    @classmethod
    def _volume_word(cls, value: str) -> str:
        if not re.fullmatch(DATASET_WORD, value):
            raise ValueError(
                "lower-case letters, digits and '-' (it names the dataset's volume), e.g. "
                "d-4rb4dkdp1bq3s5u2qu and v1"
            )
        return value

    def volume(self) -> str:
        """The volume's name: a Docker named volume on the node, a PersistentVolumeClaim in
        Wharf's namespace on Kubernetes."""
        return f"{DATASET_PREFIX}{self.id}-{self.version}"


class StorageEntry(_Strict):
    mount_path: str
    empty_dir: EmptyDir | None = None
    oss: ObjectStorage | None = None
    obs: ObjectStorage | None = None
    s3: ObjectStorage | None = None
    nfs: Nfs | None = None
    pvc: Pvc | None = Field(
        default=None,
        description="A PersistentVolumeClaim (WHARF_RUNTIME=kubernetes only; the Docker and "
        "process runtimes cannot mount one).",
    )
    git: GitRepository | None = None
    image: ImageFolder | None = None
    dataset: Dataset | None = Field(
        default=None,
        description="A PAI dataset: the volume wharf-dataset-<id>-<version> an operator made "
        "and filled (Docker: a named volume on each node; Kubernetes: a claim of that name).",
    )
    properties: dict[str, str] | None = Field(default=None, description=STORAGE["properties"])

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError("mount_path must be an absolute path without '..'")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> StorageEntry:
        sources = [s for s in STORAGE_SOURCES if getattr(self, s)]
        if len(sources) != 1:
            raise ValueError(f"give exactly one of {', '.join(STORAGE_SOURCES)}")
        for scheme in OBJECT_STORAGE_SCHEMES:
            entry = getattr(self, scheme)
            if entry and not re.fullmatch(
                rf"{scheme}://[a-z0-9][a-z0-9.-]{{1,62}}(/.*)?", entry.path
            ):
                raise ValueError(f"{scheme}.path must look like {scheme}://bucket/prefix/")
        return self

    def object_store(self) -> ObjectStorage | None:
        """Its oss, obs or s3 source, if it has one."""
        return self.oss or self.obs or self.s3

    def writable_store(self) -> ObjectStorage | None:
        """Its object-storage source when mounted writable (`readOnly: false`)."""
        store = self.object_store()
        return store if store is not None and store.readOnly is False else None


def unset_storage_fields(entry: dict) -> None:
    """Drop, from a dumped storage entry, the fields added since spec hashes were first kept
    (git, image, an object store's readOnly) where they are unset, so that a spec that does
    not use them hashes as before and its instances are not replaced on an upgrade."""
    for name in ("git", "image", "dataset"):
        if entry.get(name) is None:
            entry.pop(name, None)
    for scheme in OBJECT_STORAGE_SCHEMES:
        if isinstance(entry.get(scheme), dict) and entry[scheme].get("readOnly") is None:
            entry[scheme].pop("readOnly", None)
