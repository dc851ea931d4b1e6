"""Model references on a hub: `hf://org/name[@revision]` (Hugging Face Hub) and
`modelscope://org/name[@revision]` (ModelScope). The spec accepts them wherever it names a
model; nodes stage them (workers.models.hub) at the commit the revision resolves to."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_REVISIONS = {"hf": "main", "modelscope": "master"}
# Where each hub is unless the operator names a mirror (WHARF_HF_ENDPOINT, ...).
ENDPOINTS = {"hf": "https://huggingface.co", "modelscope": "https://www.modelscope.cn"}
HUB_SCHEMES = tuple(DEFAULT_REVISIONS)
_REPO = re.compile(r"\w(?:[\w.-]*\w)?/\w(?:[\w.-]*\w)?", re.ASCII)
_REVISION = re.compile(r"(?!.*(\.\.|//))\w[\w./-]{0,199}(?<![/.])(?<!\.lock)", re.ASCII)
COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HubRef:
    """A repository on a hub, and a revision of it: a branch, a tag or a 40-hex commit."""

    scheme: str  # "hf" or "modelscope"
    repo: str  # "org/name"
    revision: str

    @property
    def name(self) -> str:
        return f"{self.scheme}://{self.repo}"

    @property
    def pinned(self) -> bool:
        """Whether the revision is a commit (nothing to resolve)."""
        return bool(COMMIT.fullmatch(self.revision))


def is_hub_ref(ref: str) -> bool:
    return ref.partition("://")[0] in HUB_SCHEMES and "://" in ref


def parse_hub_ref(ref: str) -> HubRef:
    """`hf://org/name[@revision]` or `modelscope://org/name[@revision]`; else ValueError."""
    scheme, sep, rest = ref.partition("://")
    if not sep or scheme not in DEFAULT_REVISIONS:
        raise ValueError(f"{ref!r}: expected hf://org/name[@revision] or modelscope://org/name")
    repo, at, revision = rest.partition("@")
    if not _REPO.fullmatch(repo) or len(repo) > 96 or "--" in repo or ".." in repo:
        raise ValueError(f"{ref!r}: the repository must be org/name, as the hub allows names")
    revision = revision if at else DEFAULT_REVISIONS[scheme]
    if not _REVISION.fullmatch(revision):
        raise ValueError(f"{ref!r}: {revision!r} is neither a branch or tag name nor a commit")
    return HubRef(scheme, repo, revision)
