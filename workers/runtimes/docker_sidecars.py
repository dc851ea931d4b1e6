"""An instance's other containers on Docker (contracts.engines.sidecars): each a container in
the main container's network namespace (network_mode "container:<id>", as a pod's containers
share one), labelled as the instance's, created after the main one and removed before it.

None restarts by itself (Docker's restart policy "no"), nor does the main container: a
container in another's namespace loses it when that one restarts. So one that exits makes the
whole instance not running, and the agent restarts all of them together (its back-off, its
events), as it restarts an engine and its front (workers.runtimes.docker_front).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from docker.errors import APIError, ImageNotFound, NotFound

from contracts.engines.plan import Mount, SidecarPlan
from workers.runtimes.base import (
    LABEL_INSTANCE,
    LABEL_NODE,
    LABEL_SERVICE,
    LABEL_SPEC_HASH,
    InstanceError,
    InstanceRequest,
)

LABEL_SIDECAR = "wharf.sidecar-of"  # on a sidecar: the instance whose container it is
LABEL_SIDECARS = "wharf.sidecars"  # on a main container: how many sidecars it has
LABEL_CONTAINER = "wharf.container"  # on a sidecar: its index in the spec's containers
NO_RESTART = {"Name": "no"}


def sidecar_name(instance: str, index: int) -> str:
    """containers[index]'s container name: `<instance>-c<index>`."""
    return f"{instance}-c{index}"


def start_sidecars(
    client, request: InstanceRequest, main_id: str, node: str,
    docker_mounts: Callable[[list[Mount]], list],
) -> None:  # fmt: skip
    """Create and start the sidecars of `request`'s instance beside its main container
    (`main_id`), in the spec's order; InstanceError naming the container Docker refused (the
    caller removes the instance)."""
    for sidecar in request.plan.sidecars:
        where = f"containers[{sidecar.index}]"
        options = sidecar_options(request, sidecar, main_id, node, docker_mounts(sidecar.mounts))
        try:  # never pulled here (docker-py would, with the node's login): prepare pulls
            client.images.get(sidecar.image)
            client.containers.run(sidecar.image, detach=True, **options)
        except ImageNotFound:
            raise InstanceError(f"{where}'s image {sidecar.image} is not on this node; "
                                "pull it first") from None  # fmt: skip
        except APIError as exc:
            raise InstanceError(f"docker refused {where}: {exc.explanation or exc}") from exc


def sidecar_options(
    request: InstanceRequest, sidecar: SidecarPlan, main_id: str, node: str, mounts: list
) -> dict:
    """docker-py's containers.run options of `sidecar` of `request`'s instance, whose main
    container is `main_id`: its command (none: the image's entrypoint), its env only, the
    instance's storage `mounts` (docker-py Mounts), its bounds, nothing it may gain."""
    assert sidecar.memory_bytes and sidecar.cpus and sidecar.pids_limit  # engines.sidecars
    name = sidecar_name(request.name, sidecar.index)
    args = sidecar.args
    return {
        **({"entrypoint": args[:1], "command": args[1:]} if args else {}),
        "name": name,
        "labels": {
            LABEL_SIDECAR: request.name,
            LABEL_CONTAINER: str(sidecar.index),
            LABEL_SERVICE: request.service,
            LABEL_INSTANCE: name,
            LABEL_SPEC_HASH: request.spec_hash,
            LABEL_NODE: node,
        },
        "environment": sidecar.env,
        "network_mode": f"container:{main_id}",
        "mounts": mounts,
        "restart_policy": NO_RESTART,
        "init": True,  # as the engine's (docker.run_options): stopped by SIGTERM
        "mem_limit": sidecar.memory_bytes,
        "memswap_limit": sidecar.memory_bytes,
        "nano_cpus": int(sidecar.cpus * 1e9),
        "pids_limit": sidecar.pids_limit,
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
    }


def companions(containers: list) -> tuple[dict[str, list], list]:
    """Of one node's labelled containers: ({instance: its sidecar containers}, the others)."""
    found: dict[str, list] = {}
    others = []
    for container in containers:
        owner = container.labels.get(LABEL_SIDECAR)
        if owner:
            found.setdefault(owner, []).append(container)
        else:
            others.append(container)
    return found, others


def sidecars_down(main, sidecars: list) -> str:
    """What of the instance of `main` (its main container) is down among its `sidecars`:
    "containers[2] exited with code 1", one missing (its main container's label counts them),
    or "" when all run."""
    if len(sidecars) < int(main.labels.get(LABEL_SIDECARS) or 0):
        return "a container beside the main one is gone"
    for container in sorted(sidecars, key=index):
        state = container.attrs.get("State", {})
        if state.get("Restarting") or not state.get("Running"):
            code = state.get("ExitCode")
            return f"{where(container)} exited" + ("" if code is None else f" with code {code}")
    return ""


def of_instance(client, instance: str) -> list:
    """The sidecar containers of `instance`, in the spec's order; [] when they cannot be
    listed just now (one removed while docker-py inspected it)."""
    with contextlib.suppress(NotFound):
        found = client.containers.list(all=True, filters={"label": f"{LABEL_SIDECAR}={instance}"})
        return sorted(found, key=index)
    return []


def sidecar_logs(client, instance: str, tail: int) -> str:
    """Each sidecar's last `tail` lines, after a line naming it: the instance's logs follow
    its main container's with these."""
    found = ""
    for container in of_instance(client, instance):
        with contextlib.suppress(NotFound, APIError):
            logs = container.logs(tail=tail).decode(errors="replace")
            found += f"\n==> {where(container)} <==\n{logs}"
    return found


def index(container) -> int:
    """A sidecar container's index in the spec's containers (its label)."""
    return int(container.labels.get(LABEL_CONTAINER) or 0)


def where(container) -> str:
    """A sidecar container as the spec names it: containers[2]."""
    return f"containers[{index(container)}]"
