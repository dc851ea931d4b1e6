"""The operator's policy applied to a spec: what the workspace's grants (contracts.grants)
refuse, as one 403 naming each field and the grant that would allow it."""

from __future__ import annotations

import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from rest_framework import exceptions

from contracts.engines import default_images
from contracts.grants import (
    Setting,
    git_granted,
    local_address,
    own_images,
    refusals,
    registry_address,
    registry_granted,
    registry_host,
)
from contracts.spec import ServiceSpec
from controlplane.workspaces.models import Workspace


class NotGranted(exceptions.APIException):
    """403 {"detail": "...", "errors": {"storage[0].nfs": ["... (grants.nfs)"]}}."""

    status_code = 403

    def __init__(self, workspace: str, errors: dict[str, list[str]]):
        fields = ", ".join(errors)
        detail = (f"Workspace {workspace!r} is not granted what this spec asks for ({fields}); "
                  "nothing was saved.")  # fmt: skip
        super().__init__({"detail": detail, "errors": errors})
        self.errors = errors


def wharf_claims() -> frozenset[str]:
    """Wharf's own PersistentVolumeClaims: never a tenant's to mount, whatever is granted."""
    return frozenset(c for c in (settings.WHARF_K8S_MODEL_CLAIM, settings.WHARF_K8S_KV_CLAIM) if c)


def platform_images() -> frozenset[str]:
    """Images the platform vouches for: the engines' own, the vLLM CPU image built here, and
    the operator's WHARF_APPROVED_IMAGES."""
    return frozenset({*default_images().values(), settings.WHARF_VLLM_CPU_IMAGE,
                      *settings.WHARF_APPROVED_IMAGES})  # fmt: skip


def spec_refusals(spec: ServiceSpec, workspace: Workspace, runtime: str) -> dict[str, list[str]]:
    """What `spec` asks for past `workspace`'s grants on `runtime` (contracts.grants)."""
    return refusals(spec, workspace.parsed_grants(), workspace.name, runtime,
                    platform_images(), wharf_claims())  # fmt: skip


def check_spec(spec: ServiceSpec, workspace: Workspace) -> None:
    """Raise NotGranted if `spec` asks for more than `workspace` is granted on the runtime
    the API knows of (WHARF_RUNTIME; a node checks again with its own: workers.nodes.starter)."""
    errors = spec_refusals(spec, workspace, settings.WHARF_RUNTIME)
    if errors:
        raise NotGranted(workspace.name, errors)


def addresses(host: str) -> list[str]:
    """What `host` resolves to here; none if it does not (the pull then says why)."""
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError):
        return []


def registry_refusals(
    spec: ServiceSpec, workspace: Workspace, resolve: Callable[[str], list[str]] = addresses
) -> dict[str, list[str]]:
    """The registries of the workspace's own images (its containers', its storage[].image
    mounts') as the node will reach them: a name that resolves to a local address is refused
    as that address is (contracts.grants.local_host). Checked where the images are pulled,
    with that node's resolver."""
    images = platform_images()
    wanted = [(field, registry_host(image)) for field, image in own_images(spec, images)] + [
        (f"storage[{i}].image.image", registry_host(entry.image.image))
        for i, entry in enumerate(spec.storage)
        if entry.image is not None and entry.image.image not in images
    ]
    grants = workspace.parsed_grants()
    found = {}
    for field, registry in wanted:
        if registry is None or registry_granted(registry, grants):
            continue
        local = [a for a in resolve(registry_address(registry)) if local_address(a)]
        if local:
            found[field] = [f"registry {registry} resolves to {', '.join(local)}, a local "
                            f"address; {Setting('registries').hint(workspace.name)}"]  # fmt: skip
    return found


def git_refusals(
    spec: ServiceSpec, workspace: Workspace, resolve: Callable[[str], list[str]] = addresses
) -> dict[str, list[str]]:
    """Each storage[].git repository whose server's name resolves, on the node about to clone
    it, to a local address the workspace is not granted (contracts.grants.git_refusal checks
    literal addresses and file:// on save)."""
    found = {}
    grants = workspace.parsed_grants()
    for i, entry in enumerate(spec.storage):
        host = urlsplit(entry.git.repo).hostname if entry.git else None
        if host is None or git_granted(entry.git.repo, grants):  # type: ignore[union-attr]
            continue
        local = [a for a in resolve(host) if local_address(a)]
        if local:
            found[f"storage[{i}].git.repo"] = [
                f"{host} resolves to {', '.join(local)}, a local address; "
                f"{Setting('git_repositories').hint(workspace.name)}"
            ]
    return found
