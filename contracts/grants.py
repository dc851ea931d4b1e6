"""What a workspace may make the shared machinery do: the operator's grants, and a spec's
refusals under them. Pure (no Django, no I/O), so the trust table is tested as a table.

A spec is a tenant's request to shared machinery: nodes, their network and account, storage
servers, the platform's credentials. Each capability that reaches past the workspace is
closed by default; staff open it per workspace (`Workspace.grants`, the API's
`/workspaces/<ws>/grants`), and a refusal names the field and the grant that would allow it.
The README's "Trust model" section is this module in words: keep the two in step.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import posixpath
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator

from contracts.hub_refs import is_hub_ref
from contracts.spec import K8S_NAME, SAFE_WORD, ServiceSpec, _Strict
from contracts.spec_facts import model_refs
from contracts.spec_models import OBJECT_STORAGE_SCHEMES
from contracts.spec_storage import Dataset

MAX_GRANTS = 256  # entries of one list

# Environment variables that load or run code in the engine's process, or open its admin
# routes: on a node's own account (the process runtime) they are a tenant running code there.
CODE_ENV = re.compile(r"^(LD_.*|PYTHON.*|BASH_ENV|ENV|PERL5.*|NODE_OPTIONS|VLLM_PLUGINS)$")
DEV_MODE_ENV = frozenset({"VLLM_SERVER_DEV_MODE"})
CODE_FLAGS = frozenset({"--trust-remote-code", "--trust_remote_code"})
# The KV connectors that move KV over a shared folder, not the network (engines.pd).
FOLDER_CONNECTORS = frozenset({"ExampleConnector"})
PROCESS = "process"
# A registry as an image reference names it: a host name, IPv4 or [IPv6], and a port.
REGISTRY = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?"


class PvcGrant(_Strict):
    claim: str = Field(max_length=253, pattern=K8S_NAME, description="A claim's name.")
    read_write: bool = Field(default=False, description="May it be mounted read-write.")


class DatasetGrant(_Strict):
    id: str = Field(
        max_length=63, pattern=r"^[a-z0-9*?][-a-z0-9*?]*$",
        description="Dataset ids, '*' and '?' wildcards: 'd-*' is every dataset.",
    )  # fmt: skip
    read_write: bool = Field(default=False, description="May they be mounted read-write.")


class Grants(_Strict):
    """A workspace's grants; every one closed by default."""

    host_network: bool = Field(
        default=False,
        description="Prefill/decode engines with a network KV connector may run in the node's "
        "network namespace with the workspace's own image or command.",
    )
    process_code: bool = Field(
        default=False,
        description="On the process runtime (engines on the node's own account), the "
        "workspace may run its own command, engine flags and code-loading variables.",
    )
    dev_mode: bool = Field(
        default=False, description="Engines may run with vLLM's dev-mode admin routes."
    )
    nfs: list[str] = Field(
        default=[], max_length=MAX_GRANTS,
        description="NFS exports, 'server:/path': a mount's path must be one or beneath one.",
    )  # fmt: skip
    pvc: list[PvcGrant] = Field(default=[], max_length=MAX_GRANTS)
    datasets: list[DatasetGrant] = Field(
        default=[], max_length=MAX_GRANTS,
        description="storage[].dataset volumes (wharf-dataset-<id>-<version>) the workspace "
        "may mount: the operator's, shared by every workspace granted them.",
    )  # fmt: skip
    storage_endpoints: list[str] = Field(
        default=[], max_length=MAX_GRANTS,
        description="Object-storage endpoints a spec may name, 'scheme://host[:port]'.",
    )  # fmt: skip
    platform_buckets: list[str] = Field(
        default=[], max_length=MAX_GRANTS,
        description="Object-storage prefixes ('s3://bucket/prefix', '*' wildcards) the "
        "platform's own credentials (WHARF_<S>_ACCESS_KEY_*) may read for the workspace.",
    )  # fmt: skip
    resource_groups: list[str] = Field(
        default=[], max_length=MAX_GRANTS,
        description="metadata.resource values (node groups) the workspace may place on.",
    )  # fmt: skip
    registries: list[str] = Field(
        default=[], max_length=MAX_GRANTS,
        description="Image registries at a loopback, link-local or private address that the "
        "workspace's own images may come from, 'host[:port]' (no port: any).",
    )  # fmt: skip

    git_repositories: list[str] = Field(
        default=[], max_length=MAX_GRANTS,
        description="Git servers at a loopback, link-local or private address, "
        "'scheme://host[:port]', and folders of the node, 'file:///path' (a repo there or "
        "beneath), that storage[].git may clone from.",
    )  # fmt: skip

    @field_validator("git_repositories")
    @classmethod
    def _git(cls, value: list[str]) -> list[str]:
        return [git_server(granted) for granted in value]

    @field_validator("nfs")
    @classmethod
    def _exports(cls, value: list[str]) -> list[str]:
        for export in value:
            server, _, path = export.partition(":")
            if not server or not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"{export!r}: an export is server:/absolute/path")
        return value

    @field_validator("storage_endpoints")
    @classmethod
    def _endpoints(cls, value: list[str]) -> list[str]:
        return [_endpoint_key(endpoint) for endpoint in value]

    @field_validator("platform_buckets")
    @classmethod
    def _buckets(cls, value: list[str]) -> list[str]:
        for prefix in value:
            scheme, _, rest = prefix.partition("://")
            if scheme not in OBJECT_STORAGE_SCHEMES or not rest:
                raise ValueError(f"{prefix!r}: a prefix is oss://, obs:// or s3:// bucket/path")
        return value

    @field_validator("registries")
    @classmethod
    def _registries(cls, value: list[str]) -> list[str]:
        for registry in value:
            if not re.fullmatch(REGISTRY, registry):
                raise ValueError(f"{registry!r}: a registry is host[:port]")
        return [registry.lower() for registry in value]

    @field_validator("resource_groups")
    @classmethod
    def _groups(cls, value: list[str]) -> list[str]:
        for group in value:
            if not re.fullmatch(SAFE_WORD, group):
                raise ValueError(f"{group!r}: a resource group is a label value")
        return value


class GrantsError(ValueError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def parse_grants(data: Any) -> Grants:
    """Grants from JSON, or GrantsError naming each bad field (`grants.nfs[0]`)."""
    try:
        return Grants.model_validate(data if data is not None else {})
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for error in exc.errors():
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
            errors.setdefault(f"grants{where}", []).append(error["msg"].removeprefix(
                "Value error, "))  # fmt: skip
        raise GrantsError(errors) from None


def _endpoint_key(endpoint: str) -> str:
    """An endpoint as compared: scheme://host[:port], lower case, no path. A bare host is
    https, as contracts.object_store reads it."""
    text = endpoint.strip()
    parts = urlsplit(text if "://" in text else f"https://{text}")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        raise ValueError(f"{endpoint!r}: an endpoint is http(s)://host[:port]")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError(f"{endpoint!r}: an endpoint has no path, query or fragment")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname.lower()}{port}"


@dataclass(frozen=True)
class Setting:
    """Where an operator widens a capability: the grant's name, for refusals."""

    grant: str

    def hint(self, workspace: str) -> str:
        return f"staff may grant it to workspace {workspace!r} (grants.{self.grant})"


def refusals(
    spec: ServiceSpec,
    grants: Grants,
    workspace: str,
    runtime: str,
    approved_images: Collection[str] = (),
    wharf_claims: Collection[str] = (),
) -> dict[str, list[str]]:
    """Each field of `spec` that asks for more than `grants` allow, with what to do. `runtime`
    is WHARF_RUNTIME; `approved_images` the platform's images (WHARF_APPROVED_IMAGES);
    `wharf_claims` Wharf's own PersistentVolumeClaims, never a tenant's."""
    found: dict[str, list[str]] = {}

    def refuse(field: str, why: str, grant: str) -> None:
        found.setdefault(field, []).append(f"{why}; {Setting(grant).hint(workspace)}")

    code = tenant_code(spec, approved_images)
    if needs_host_network(spec) and not grants.host_network and code:
        field, what = code[0]
        refuse(field, f"{what}, and its network KV connector runs on the node's network",
               "host_network")  # fmt: skip
    if runtime == PROCESS and not grants.process_code:
        for field, what in code:
            refuse(field, f"{what}, on the process runtime (the node's own account)",
                   "process_code")  # fmt: skip
    for field, name in engine_env(spec):
        if name in DEV_MODE_ENV and not grants.dev_mode:
            refuse(field, f"{name} opens the engine's admin routes", "dev_mode")
    _storage(spec, grants, refuse)
    for i, entry in enumerate(spec.storage):
        if entry.pvc is not None and entry.pvc.claim_name in wharf_claims:
            found[f"storage[{i}].pvc.claim_name"] = [
                f"claim {entry.pvc.claim_name!r} is Wharf's own; no workspace may mount it"
            ]
    _mounted_images(spec, grants, approved_images, refuse)
    for field, image in own_images(spec, approved_images):
        registry = registry_host(image)
        if (
            registry is not None
            and not registry_granted(registry, grants)
            and (local_host(registry_address(registry)))
        ):
            refuse(field, f"registry {registry} is at a local address", "registries")
    group = spec.metadata.resource
    if group is not None and group not in grants.resource_groups:
        refuse("metadata.resource", f"resource group {group!r} is not granted",
               "resource_groups")  # fmt: skip
    return found


def _storage(spec: ServiceSpec, grants: Grants, refuse: Callable[[str, str, str], None]) -> None:
    claims = {pvc.claim: pvc for pvc in grants.pvc}
    for i, entry in enumerate(spec.storage):
        where = f"storage[{i}]"
        if entry.nfs is not None:
            export = f"{entry.nfs.server}:{posixpath.normpath(entry.nfs.path)}"
            if not any(_under(export, granted) for granted in grants.nfs):
                refuse(f"{where}.nfs", f"NFS export {export!r} is not granted", "nfs")
        if entry.pvc is not None:
            grant = claims.get(entry.pvc.claim_name)
            if grant is None:
                refuse(f"{where}.pvc.claim_name",
                       f"claim {entry.pvc.claim_name!r} is not granted", "pvc")  # fmt: skip
            elif not entry.pvc.read_only and not grant.read_write:
                refuse(f"{where}.pvc.read_only",
                       f"claim {entry.pvc.claim_name!r} is granted read-only", "pvc")  # fmt: skip
        if entry.dataset is not None and (refused := dataset_refusal(entry.dataset, grants)):
            refuse(f"{where}.dataset.{refused[0]}", refused[1], "datasets")
        if entry.git is not None and (why := git_refusal(entry.git.repo, grants)):
            refuse(f"{where}.git.repo", why, "git_repositories")
        for scheme in OBJECT_STORAGE_SCHEMES:
            store = getattr(entry, scheme)
            if store is None:
                continue
            if store.endpoint is not None:
                try:
                    key = _endpoint_key(store.endpoint)
                except ValueError as exc:
                    refuse(f"{where}.{scheme}.endpoint", str(exc), "storage_endpoints")
                    continue
                if key not in grants.storage_endpoints:
                    refuse(f"{where}.{scheme}.endpoint", f"endpoint {key} is not granted",
                           "storage_endpoints")  # fmt: skip
            if not store.access_key_id and not platform_may_read(store.path, grants):
                refuse(f"{where}.{scheme}.access_key_id",
                       f"no credentials given, and the platform's are not granted for "
                       f"{store.path}: give access_key_id and access_key_secret",
                       "platform_buckets")  # fmt: skip
    for field, ref in model_refs(spec):  # object URIs as models read with the platform's keys
        if "://" in ref and not is_hub_ref(ref) and not platform_may_read(ref, grants):
            refuse(field, f"{ref} is read with the platform's credentials, which are not "
                   "granted for it; or mount it as storage with your own keys",
                   "platform_buckets")  # fmt: skip


def _mounted_images(
    spec: ServiceSpec, grants: Grants, approved_images: Collection[str],
    refuse: Callable[[str, str, str], None],
) -> None:  # fmt: skip
    """storage[].image: a folder of an image the node pulls for the workspace, under the same
    registries policy as its own container image."""
    for i, entry in enumerate(spec.storage):
        image = entry.image.image if entry.image else None
        registry = registry_host(image) if image and image not in approved_images else None
        if (
            registry
            and not registry_granted(registry, grants)
            and local_host(registry_address(registry))
        ):
            refuse(f"storage[{i}].image.image", f"registry {registry} is at a local address",
                   "registries")  # fmt: skip


def dataset_refusal(dataset: Dataset, grants: Grants) -> tuple[str, str] | None:
    """(the field, why) when mounting `dataset` as asked is not granted, or None."""
    granted = [g for g in grants.datasets if fnmatch.fnmatchcase(dataset.id, g.id)]
    if not granted:
        return "id", f"dataset {dataset.id!r} is not granted"
    if not dataset.read_only and not any(g.read_write for g in granted):
        return "read_only", f"dataset {dataset.id!r} is granted read-only"
    return None


def git_server(url: str) -> str:
    """What a git_repositories grant and a repo are compared by: `scheme://host[:port]`
    (lower case) for a server, `file:///path` (normalised) for a folder of the node."""
    parts = urlsplit(url.strip())
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"{url!r}: a folder is file:///absolute/path")
        return "file://" + posixpath.normpath(parts.path)
    if parts.scheme not in ("https", "http", "git") or not parts.hostname:
        raise ValueError(f"{url!r}: a git server is https://, http:// or git://host[:port]")
    port = f":{parts.port}" if parts.port else ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host.lower()}{port}"


def git_granted(repo: str, grants: Grants) -> bool:
    """Whether `repo` is a granted server's, or lies in a granted folder of the node."""
    server = git_server(repo)
    if server.startswith("file://"):
        path = server.removeprefix("file://")
        return any(
            path == folder or path.startswith(folder.rstrip("/") + "/")
            for folder in (g.removeprefix("file://") for g in grants.git_repositories
                           if g.startswith("file://"))
        )  # fmt: skip
    return server in grants.git_repositories


def git_refusal(repo: str, grants: Grants) -> str | None:
    """Why cloning `repo` for the workspace is refused (a folder of the node, or a server at a
    local address: the node would reach them for the tenant), or None. A name that resolves
    to a local address is checked where it is resolved, on the node (workers.models.git_mounts)."""
    if git_granted(repo, grants):
        return None
    parts = urlsplit(repo)
    if parts.scheme == "file":
        return f"{repo} is a folder of the node"
    if parts.hostname and local_host(parts.hostname):
        return f"{parts.hostname} is a local address"
    return None


def _under(export: str, granted: str) -> bool:
    server, _, path = granted.partition(":")
    path = posixpath.normpath(path)
    asked_server, _, asked = export.partition(":")
    return asked_server == server and (asked == path or asked.startswith(path.rstrip("/") + "/"))


def platform_may_read(uri: str, grants: Grants) -> bool:
    """Whether the platform's own credentials may read `uri` for the workspace: under a
    granted prefix (fnmatch wildcards; a prefix ends at a '/' or the end)."""
    return any(
        fnmatch.fnmatchcase(uri, prefix) or fnmatch.fnmatchcase(uri, prefix.rstrip("/") + "/*")
        for prefix in grants.platform_buckets
    )


def needs_host_network(spec: ServiceSpec) -> bool:
    """A prefill/decode service whose KV connector moves KV over the network: its containers
    run in the node's network namespace (contracts.engines.pd.on_host_network)."""
    pd = spec.llm.pd if spec.llm else None
    return pd is not None and pd.kv_connector not in FOLDER_CONNECTORS


def engine_env(spec: ServiceSpec) -> list[tuple[str, str]]:
    """(field, name) of every variable the spec sets, in each of its containers."""
    return [
        (f"containers[{i}].env[{j}].name", var.name)
        for i, container in enumerate(spec.containers)
        for j, var in enumerate(container.env)
    ]


def own_image(spec: ServiceSpec, approved_images: Collection[str] = ()) -> str | None:
    """The image the spec names for its main container if it is the workspace's own (not one
    the platform vouches for): its registry access is the workspace's to prove, never the
    node's login."""
    container = spec.containers[0] if spec.containers else None
    image = container.image if container else None
    return image if image and image not in approved_images else None


def own_images(spec: ServiceSpec, approved_images: Collection[str] = ()) -> list[tuple[str, str]]:
    """(field, image) of each container image of the spec that is the workspace's own: the
    main container's (own_image) and its sidecars' (contracts.engines.sidecars)."""
    return [
        (f"containers[{i}].image", container.image)
        for i, container in enumerate(spec.containers)
        if container.image and container.image not in approved_images
    ]


def tenant_code(spec: ServiceSpec, approved_images: Collection[str] = ()) -> list[tuple[str, str]]:
    """Where a spec runs code of the tenant's choosing, rather than the platform's engine as
    Wharf renders it: (field, what) for each."""
    found = [(field, f"image {image!r} is the workspace's own")
             for field, image in own_images(spec, approved_images)]  # fmt: skip
    for i, container in enumerate(spec.containers):
        for name in ("command", "script"):
            if getattr(container, name):
                found.append((f"containers[{i}].{name}", f"a given {name} runs as written"))
    llm = spec.llm
    if llm is not None and llm.extra_args:
        found.append(("llm.extra_args", "extra_args pass any engine flag"))
    if llm is not None and CODE_FLAGS & {k for k, v in llm.options.items() if v is not False}:
        found.append(("llm.options", "--trust-remote-code runs the model's own code"))
    for field, name in engine_env(spec):
        if CODE_ENV.match(name) or name in DEV_MODE_ENV:
            found.append((field, f"{name} loads or runs code in the engine"))
    return found


def registry_host(image: str) -> str | None:
    """The registry an image reference names, lower case, or None for Docker Hub: Docker's
    rule, a first component with a '.' or ':', or 'localhost'."""
    first, slash, _ = image.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return None
    return first.lower()


def registry_address(registry: str) -> str:
    """A registry's host without its port (and an IPv6 address without its brackets)."""
    return _host_port(registry)[0]


def _host_port(registry: str) -> tuple[str, str]:
    if registry.startswith("["):
        host, _, rest = registry[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = registry.partition(":")
    return host, port


def registry_granted(registry: str, grants: Grants) -> bool:
    """Whether `registry` (host[:port]) is granted: the same entry, or its host's with no
    port (any port)."""
    host, port = _host_port(registry)
    return any(
        (granted_host, granted_port) in ((host, port), (host, ""))
        for granted_host, granted_port in map(_host_port, grants.registries)
    )


def local_host(host: str) -> bool:
    """Whether `host` is `localhost` or an address that is not on the public internet
    (loopback, link-local, private, shared, reserved, unspecified). A name is not, by itself:
    what it resolves to is checked where it is resolved (workers.nodes.starter)."""
    host = host.rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return local_address(host)
    except ValueError:
        return False


def local_address(address: str) -> bool:
    """Whether an IP address (ValueError if it is none) is not a public one."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global
