"""Pulling an engine image a node lacks, through the Docker daemon, with its progress as a
short line ("pulling registry.example/vllm:0.9: 45% of 2.6 GB") at most about once a second.

Credentials: the spec's dockerAuth (EAS's base64 of "user:password"), else whatever the node's
own `docker login` stored (~/.docker/config.json, credential helpers included). A pull the user
must fix (no such image, credentials refused, a malformed name) is an InstanceError naming the
image; anything else (the registry or the network down, the daemon busy) is PullError, which
the agent retries after its back-off.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from docker.errors import APIError
from docker.utils import parse_repository_tag

from contracts.spec_fleet import docker_credentials
from workers.runtimes.base import InstanceError, Report

INTERVAL = 1.0  # seconds between two progress reports
MAX_DETAIL = 300  # characters of the daemon's message kept in ours
# What registries and dockerd say when they refuse: "unauthorized: authentication required",
# "no basic auth credentials", Docker Hub's "pull access denied ... denied: requested access to
# the resource is denied", "incorrect username or password".
REFUSED = ("unauthorized", "authentication required", "no basic auth credentials", "denied",
           "incorrect username or password", "forbidden")  # fmt: skip
# "manifest unknown", "manifest for x:1 not found", "repository name not known", ...
MISSING = ("manifest unknown", "not found", "name unknown", "not known", "does not exist")
MALFORMED = ("invalid reference format", "invalid tag format", "repository name must")


class PullError(Exception):
    """A pull that may work later: retried after a back-off."""


class PullProgress:
    """A pull's progress from the daemon's JSON messages, summed over its layers."""

    def __init__(self, image: str):
        self.image = image
        self.sizes: dict[str, list[int]] = {}  # layer id -> [bytes downloaded, its size]
        self.extracting = False

    def update(self, event: dict) -> None:
        layer, status = event.get("id"), str(event.get("status") or "")
        if not layer or layer == self._tag():
            return
        detail = event.get("progressDetail") or {}
        if status == "Downloading" and detail.get("total"):
            self.sizes[layer] = [int(detail.get("current") or 0), int(detail["total"])]
        elif status in ("Verifying Checksum", "Download complete", "Extracting", "Pull complete"):
            if layer in self.sizes:
                self.sizes[layer][0] = self.sizes[layer][1]
            self.extracting = self.extracting or status == "Extracting"

    def _tag(self) -> str:
        return parse_repository_tag(self.image)[1] or "latest"

    def text(self) -> str:
        done = sum(current for current, _ in self.sizes.values())
        total = sum(size for _, size in self.sizes.values())
        if not total:
            return f"pulling {self.image}"
        if done >= total and self.extracting:
            return f"pulling {self.image}: extracting {size_text(total)}"
        return f"pulling {self.image}: {done * 100 // total}% of {size_text(total)}"


def size_text(size: int) -> str:
    """Bytes the way docker prints them: 2.6 GB, 731.2 MB (decimal units)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _used(docker_auth: str | None, node_login: bool) -> str:
    """Which credentials a pull sent, as a refusal names them."""
    if docker_auth:
        return "the spec's dockerAuth"
    if node_login:
        return "the node's docker login, as the spec has no dockerAuth"
    return ("none: the spec has no dockerAuth, and the node's own login serves only the "
            "platform's images")  # fmt: skip


def pull_error(image: str, message: str, used: str) -> Exception:
    """InstanceError for what the user must fix, PullError for what may pass. `used`: the
    credentials the pull sent (_used)."""
    detail = " ".join(message.split())[:MAX_DETAIL]
    text = detail.lower()
    if any(word in text for word in REFUSED):
        refused = f"the registry refused the credentials ({used})"
        return InstanceError(f"could not pull image {image}: {refused}: {detail}")
    if any(word in text for word in MISSING):
        return InstanceError(f"could not pull image {image}: its registry has no such image "
                             f"({detail})")  # fmt: skip
    if any(word in text for word in MALFORMED):
        return InstanceError(f"could not pull image {image}: {detail}")
    return PullError(f"pulling image {image} failed: {detail}")


def pull(
    api,
    image: str,
    docker_auth: str | None,
    report: Report,
    clock: Callable[[], float] = time.monotonic,
    interval: float = INTERVAL,
    node_login: bool = True,
) -> None:
    """Pull `image` through docker-py's low-level client `api`, reporting its progress. With
    no dockerAuth, the node's own `docker login` is used only with `node_login` (the
    platform's images); else the pull is anonymous."""
    repository, tag = parse_repository_tag(image)
    auth: dict | None = None
    if docker_auth:
        user, password = docker_credentials(docker_auth)
        auth = {"username": user, "password": password}
    elif node_login:
        api.reload_config()  # a `docker login` on the node since the worker started counts
    else:
        auth = {}  # sent as an empty X-Registry-Auth: no credentials, not the node's
    progress = PullProgress(image)
    report(progress.text())
    last = clock()
    try:
        events = api.pull(repository, tag or "latest", stream=True, decode=True,
                          auth_config=auth)  # fmt: skip
        for event in events:
            if event.get("error") or event.get("errorDetail"):
                message = event.get("error") or event["errorDetail"].get("message") or ""
                raise pull_error(image, str(message), _used(docker_auth, node_login))
            progress.update(event)
            if clock() - last >= interval:
                report(progress.text())
                last = clock()
    except APIError as exc:
        if exc.status_code and exc.status_code >= 500 and not exc.explanation:
            raise PullError(f"pulling image {image} failed: {exc}") from None
        raise pull_error(
            image, str(exc.explanation or exc), _used(docker_auth, node_login)
        ) from None
    report(f"pulled {image}")
