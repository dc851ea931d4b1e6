"""An instance's other containers (contracts.engines.sidecars) as containers of its pod: the
pod already shares one network namespace and its volumes, so each sidecar mounts the volumes
of the spec's storage[] (a memory or disk empty_dir too: shared here, as in any pod), runs its
command (none: its image's entrypoint) with its own env, under the operator's default bounds,
in the restricted profile. Pure."""

from __future__ import annotations

from contracts.engines.plan import SidecarPlan
from contracts.kube.names import KubeSettings
from contracts.kube.pod_template import ENGINE, cpu_quantity, literal, quantity, restricted
from contracts.limits import PRIVILEGED_PORTS
from contracts.spec import ServiceSpec


def sidecar_containers(
    spec: ServiceSpec, sidecars: list[SidecarPlan], pod: dict, settings: KubeSettings
) -> list[dict]:
    """The containers of `sidecars` for `pod` (contracts.kube.pod_template.pod_spec): its
    engine's mounts of the storage[] entries' volumes are theirs too."""
    if not sidecars:
        return []
    engine = next(c for c in pod["containers"] if c["name"] == ENGINE)
    paths = {e.mount_path for e in spec.storage if e.mount_path.rstrip("/") != "/dev/shm"}
    shared = [mount for mount in engine["volumeMounts"] if mount["mountPath"] in paths]
    found = []
    for sidecar in sidecars:
        assert sidecar.cpus and sidecar.memory_bytes  # contracts.engines.sidecars
        granted = ("NET_BIND_SERVICE",) if sidecar.port and sidecar.port < PRIVILEGED_PORTS else ()
        container: dict = {
            "name": f"container-{sidecar.index}", "image": sidecar.image,
            **({"command": [literal(arg) for arg in sidecar.args[:1]],
                "args": [literal(arg) for arg in sidecar.args[1:]]} if sidecar.args else {}),
            "env": [{"name": k, "value": literal(v)} for k, v in sidecar.env.items()],
            "resources": {
                "requests": {"cpu": "0", "memory": "0"},
                "limits": {"cpu": cpu_quantity(sidecar.cpus),
                           "memory": quantity(sidecar.memory_bytes)},
            },
            "volumeMounts": shared, "securityContext": restricted(granted),
        }  # fmt: skip
        if sidecar.port:
            container["ports"] = [{"containerPort": sidecar.port, "protocol": "TCP"}]
        if sidecar.image not in settings.platform_images:
            container["imagePullPolicy"] = "Always"
        found.append(container)
    return found
