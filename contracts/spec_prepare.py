"""EAS's `containers[].prepare`: Python requirements installed in the instance before its
command starts (`pythonRequirements`, a list of pip requirement strings, and
`pythonRequirementsPath`, a requirements.txt in the image or a mount). The image brings python
and pip; contracts.engines.prepare renders the install in front of the command. Pure.

Each requirement is one PEP 508 requirement (`numpy==1.26.4`, `pkg[extra]>=1; python_version <
"3.12"`, `pkg @ file:///wheels/pkg-1.0-py3-none-any.whl`) or a wheel's or archive's absolute
path or URL: nothing that pip would read as an option (`--index-url`, `-r`), nothing with
spaces or a shell's characters outside a PEP 508 marker's quotes. They reach pip as arguments
of their own, never through a shell line.
"""

from __future__ import annotations

import re
from typing import Annotated

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import AfterValidator, Field, field_validator, model_validator

from contracts.spec_fleet import _Strict

MAX_REQUIREMENTS = 256
MAX_REQUIREMENT = 1024
# A wheel or an archive named by where it is: pip takes these beside PEP 508 requirements.
_LOCATION = re.compile(r"^(/|file://|https?://)[A-Za-z0-9._~:/?#@!&'()*+,;=%-]+$")
_PATH = re.compile(r"^/[A-Za-z0-9._@+=,:/-]{1,1023}$")


def _requirement(text: str) -> str:
    """`text` if it is a requirement Wharf passes to pip; ValueError saying why not."""
    if not text or any(ord(c) < 32 for c in text):
        raise ValueError(f"a requirement is 1 to {MAX_REQUIREMENT} printable characters")
    if text.startswith("-"):
        raise ValueError(f"{text!r}: a requirement, not a pip option")
    if _LOCATION.fullmatch(text):
        return text
    try:
        Requirement(text)
    except InvalidRequirement:
        raise ValueError(
            f"{text!r} is not a pip requirement (e.g. numpy==1.26.4, pkg[extra]>=1, "
            "pkg @ file:///wheels/pkg.whl, or a wheel's path or URL)"
        ) from None
    return text


PipRequirement = Annotated[str, Field(max_length=MAX_REQUIREMENT), AfterValidator(_requirement)]


class Prepare(_Strict):
    pythonRequirements: list[PipRequirement] | None = Field(  # noqa: N815 (EAS spelling)
        default=None, max_length=MAX_REQUIREMENTS,
        description="pip requirements installed before the command starts (the image brings "
        "python and pip); the instance's message says so while they install.",
    )  # fmt: skip
    pythonRequirementsPath: str | None = Field(  # noqa: N815 (EAS spelling)
        default=None, max_length=1024,
        description="A requirements.txt in the image or a mount (an absolute path), installed "
        "with pip -r before the command starts.",
    )  # fmt: skip

    @field_validator("pythonRequirementsPath")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and (not _PATH.fullmatch(value) or ".." in value.split("/")):
            raise ValueError(
                "an absolute path in the image or a mount, without '..', spaces or a shell's "
                "characters, e.g. /app/requirements.txt"
            )
        return value

    @model_validator(mode="after")
    def _something(self) -> Prepare:
        if not self.pythonRequirements and not self.pythonRequirementsPath:
            raise ValueError("give pythonRequirements or pythonRequirementsPath, or leave out "
                             "prepare")  # fmt: skip
        return self

    @property
    def count(self) -> int:
        return len(self.pythonRequirements or [])


class Prepared(_Strict):
    """The container's `prepare` section."""

    prepare: Prepare | None = Field(
        default=None,
        description="Python requirements installed before the command starts (EAS's prepare).",
    )


def drop_unset_prepare(containers: list[dict]) -> None:
    """The dumped containers without a `prepare` they do not set, so that the spec hash of a
    container without one is the one it had before the field existed."""
    for container in containers:
        if container.get("prepare") is None:
            container.pop("prepare", None)
