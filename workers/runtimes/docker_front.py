"""An engine container's front (gateway.front) on Docker: a second container, from the Wharf
image, in the engine's network namespace. The engine's own port is published nowhere (its
service's other containers reach it on their bridge); the front's port is published on the
node's address, so another tenant's container that calls the node's address meets the front
and its key check, never the engine.

The engine container does not restart by itself (Docker's restart policy "no"): a container
sharing another's network namespace loses it when that one restarts, so the agent restarts
the pair (its back-off, its events). The front may restart alone: it rejoins the engine's.
"""

from __future__ import annotations

from contracts import engine_tls
from contracts.engine_front import KEY_ENV, METRICS_TOKEN_ENV, READY_PATH, front_port
from contracts.serving_tls import ServingTls
from workers.runtimes.base import LABEL_INSTANCE, LABEL_NODE, LABEL_SERVICE, InstanceRequest

LABEL_FRONT = "wharf.front-of"  # on a front: the instance it guards
LABEL_FRONTED = "wharf.fronted"  # on an engine: "1" when a front guards it
FRONT_MEMORY = 256 * 1024 * 1024
FRONT_PIDS = 64
# Where a front container finds the folders of the node's certificate and key
# (contracts.engine_tls): /run/wharf/engine-tls/0, and /1 when the key is in another folder.
TLS_DIR = "/run/wharf/engine-tls"


def fronted(request: InstanceRequest) -> bool:
    """Whether the engine gets a front: every one with a key, but those on the host network
    (granted, or the platform's own engine with vLLM's key: contracts.grants)."""
    return bool(request.engine_key) and not request.plan.host_network


def observed_url(address: str, attrs: dict, port: str, tls: ServingTls | None) -> str | None:
    """Where the gateways call an engine container (docker-py's `attrs`): the node's address
    and what `port` (its front's, when it has one) is published at, https:// with the node's
    `tls` pair (given for a fronted engine only); its own port on the host network."""
    if attrs.get("HostConfig", {}).get("NetworkMode") == "host" and port:
        return f"http://{address}:{port}"
    ports = attrs.get("NetworkSettings", {}).get("Ports") or {}
    bindings = ports.get(f"{port}/tcp")
    if not bindings:
        return None
    return engine_tls.instance_url(address, int(bindings[0]["HostPort"]), tls is not None)


def front_name(instance: str) -> str:
    return f"{instance}-front"


def engine_options(request: InstanceRequest, bind_address: str) -> dict:
    """What a fronted engine container changes of its options (run_options): the front's
    port published instead of the engine's, the front's readiness path where the engine has
    no health path, and no restart by Docker."""
    port = front_port(request.plan.port)
    return {
        "ports": {f"{port}/tcp": (bind_address, None)},
        "port": str(port),
        "health_path": request.plan.health_path or READY_PATH,
        "restart_policy": {"Name": "no"},
    }


def front_options(
    request: InstanceRequest,
    engine_id: str,
    node: str,
    metrics_token: str,
    tls: ServingTls | None = None,
) -> dict:
    """docker-py's containers.run options of the front of `request`'s engine (container id
    `engine_id`): the key in its environment only, small bounds, nothing it may write; with
    the node's `tls` pair, the folders of its two files mounted read-only (folders, not the
    files: a file replaced by a rename on the host is seen through a folder mount only)."""
    plan = request.plan
    args = ["python", "-m", "gateway.front", "--listen", f"0.0.0.0:{front_port(plan.port)}",
            "--upstream", f"127.0.0.1:{plan.port}"]  # fmt: skip
    if plan.metrics_path:
        args += ["--metrics-path", "/" + plan.metrics_path.lstrip("/")]
    for asked, reached in request.probe_ports:  # the engine's own network namespace's ports
        args += ["--probe-port", f"{asked}={reached}"]
    env = {KEY_ENV: request.engine_key}
    if metrics_token:
        env[METRICS_TOKEN_ENV] = metrics_token
    binds: dict[str, str] = {}  # a folder of the node's -> where the front sees it
    for variable, path in (
        ((engine_tls.CERT_ENV, tls.cert), (engine_tls.KEY_ENV, tls.key)) if tls else ()
    ):
        inside = binds.setdefault(str(path.absolute().parent), f"{TLS_DIR}/{len(binds)}")
        env[variable] = f"{inside}/{path.name}"
    return {
        "volumes": {folder: {"bind": inside, "mode": "ro"} for folder, inside in binds.items()},
        "command": args,
        "name": front_name(request.name),
        "labels": {
            LABEL_FRONT: request.name,
            LABEL_SERVICE: request.service,
            LABEL_INSTANCE: front_name(request.name),
            LABEL_NODE: node,
        },  # fmt: skip
        "environment": env,
        "network_mode": f"container:{engine_id}",
        "restart_policy": {"Name": "on-failure", "MaximumRetryCount": 5},
        "init": True,  # as the engine's (docker.run_options)
        "mem_limit": FRONT_MEMORY,
        "memswap_limit": FRONT_MEMORY,
        "nano_cpus": 1_000_000_000,
        "pids_limit": FRONT_PIDS,
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "read_only": True,
        "tmpfs": {"/tmp": "size=16m"},
    }
