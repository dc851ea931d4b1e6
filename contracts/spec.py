"""The service spec: EAS's JSON standalone deployment format plus Wharf's `llm` section.

Pure validation, no Django and no I/O: `parse_spec(data)` returns a typed `ServiceSpec` or
raises `SpecError` carrying every bad field, named by its JSON path (`containers[0].port`).

One strict schema: types are types (no string for a number, no true for 1), every number and
string and list has a bound, and a field Wharf does not act on is refused by name rather than
silently ignored. So whatever the API accepts, the workers and the gateway can use.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from contracts.instance_types import sized
from contracts.service_groups import GROUP_METADATA, Grouped
from contracts.spec_access import ServiceAccess
from contracts.spec_cloud import METADATA as CLOUD_METADATA
from contracts.spec_cloud import RPC as CLOUD_RPC
from contracts.spec_cloud import TOP as CLOUD_TOP
from contracts.spec_cloud import CloudOnlyMetadata, CloudOnlyTop, Networking, RpcNotes
from contracts.spec_cron import CronScaled
from contracts.spec_fleet import (  # noqa: F401 (re-exported for the spec's users)
    MAX_INSTANCES,
    MAX_STRING,
    DockerAuth,
    HealthCheck,
    Liveness,
    RollingStrategy,
    _Strict,
)
from contracts.spec_gateway_policy import RpcConcurrency
from contracts.spec_instance import SHAPING_UNLESS, UNSHAPING, InstanceSettings, RpcLifecycle
from contracts.spec_job import JOB_SHAPING_UNLESS, JobSettings
from contracts.spec_labels import ServiceLabels
from contracts.spec_models import (  # noqa: F401 (re-exported for the spec's users)
    MODEL_STORE_NAME,
    OBJECT_STORAGE_SCHEMES,
    OBJECT_URI,
    RUNTIME_LORA_ENGINES,
    Lora,
    Speculative,
    model_reference,
)
from contracts.spec_prepare import Prepared, drop_unset_prepare
from contracts.spec_probes import ContainerProbes, drop_unset_probes
from contracts.spec_queue import Queued
from contracts.spec_request_log import RequestLogged
from contracts.spec_scaling import HEADER, ROUTING, Autoscaler, RoutingPolicy
from contracts.spec_storage import (  # noqa: F401 (re-exported for the spec's users)
    K8S_NAME,
    STORAGE_SOURCES,
    EmptyDir,
    GitRepository,
    ImageFolder,
    Nfs,
    ObjectStorage,
    Pvc,
    StorageEntry,
    unset_storage_fields,
)
from contracts.spec_unit import LlmParallelism, Unitized, drop_unset_unit
from contracts.spec_webapp import NOT_SHAPING as WEB_METADATA
from contracts.spec_webapp import WebService
from contracts.warmup import WarmUp

# 8080 is where EAS and Wharf put the gateway sidecar and 9090 its metrics; an engine bound to
# either would be unreachable or shadow them.
RESERVED_PORTS = frozenset({8080, 9090})
# Each has an adapter in contracts/engines/ (custom: the given image and command, verbatim).
ENGINES = (
    "vllm", "vllm-cpu", "vllm-ascend", "sglang", "bladellm", "tgi", "paddlenlp", "custom",
)  # fmt: skip
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")
REDACTED = "******"
# Names the API routes use after /services/: a service of that name could not be reached.
RESERVED_NAMES = frozenset({"preview"})

# Bounds: generous for any real deployment, small enough that every part can use the value.
MAX_COMMAND = 65536  # a command line or script
MAX_ENV_VALUE = 32768
MAX_CARDS = 64  # cards per instance (also the largest tensor-parallel degree)
MAX_TOKENS = 16 * 1024 * 1024  # lengths and batch sizes counted in tokens
CARD_COUNT = Field(default=0, ge=0, le=MAX_CARDS)
OptionValue = (
    str
    | Annotated[int, Field(ge=-(2**63), lt=2**63)]
    | Annotated[float, Field(ge=-1e15, le=1e15)]
    | bool
)
SAFE_WORD = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"  # engine names passed as one argument


class SpecError(ValueError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


class EnvVar(_Strict):
    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str = Field(default="", max_length=MAX_ENV_VALUE)


class Container(ContainerProbes, Prepared):
    image: str | None = Field(default=None, max_length=512)
    command: str | None = Field(default=None, max_length=MAX_COMMAND)
    script: str | None = Field(default=None, max_length=MAX_COMMAND)
    port: int | None = Field(
        default=None, ge=1, le=65535,
        description="The port the engine listens on; not 8080 or 9090 (the gateway's).",
    )  # fmt: skip
    env: list[EnvVar] = Field(default=[], max_length=256)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and (not value or any(c.isspace() for c in value)):
            raise ValueError("an image reference is one word, e.g. registry/name:tag")
        return value

    @field_validator("port")
    @classmethod
    def _port(cls, value: int | None) -> int | None:
        if value in RESERVED_PORTS:
            raise ValueError(f"port {value} is reserved by the gateway; choose another port")
        return value

    @model_validator(mode="after")
    def _one_entrypoint(self) -> Container:
        if self.command and self.script:
            raise ValueError("give either command or script, not both")
        return self


class Rpc(RpcNotes, RpcLifecycle, RpcConcurrency):
    max_queue_size: int | None = Field(default=None, ge=1, le=100_000)
    keepalive: int | None = Field(default=None, ge=1, le=86_400_000, description="ms")
    rate_limit: int | None = Field(default=None, ge=1, le=1_000_000, description="requests/s")
    routing: RoutingPolicy | None = Field(default=None, description=ROUTING)
    session_header: str | None = Field(
        default=None, pattern=HEADER,
        description="With routing session: the request header naming the session "
        "(default x-session-id).",
    )  # fmt: skip


class Metadata(CloudOnlyMetadata, InstanceSettings, WebService, JobSettings, Grouped):
    instance: int = Field(default=1, ge=0, le=MAX_INSTANCES)
    cpu: float | None = Field(default=None, gt=0, le=4096)
    memory: int | None = Field(default=None, gt=0, le=64 * 1024 * 1024, description="MB")
    gpu: int = CARD_COUNT
    npu: int = CARD_COUNT
    shm_size: int | None = Field(default=None, gt=0, le=4096, description="GB")
    rpc: Rpc | None = None
    resource: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="The EAS resource group: instances are placed only on nodes labelled "
        "resource=<value>.",
    )  # fmt: skip
    termination_grace_period: int = Field(
        default=30, ge=0, le=3600,
        description="Seconds a removed instance may finish its in-flight requests before it "
        "is stopped.",
    )  # fmt: skip

    @model_validator(mode="after")
    def _whole_card(self) -> Metadata:
        self.gpu = self.whole_cards(self.gpu, self.npu)  # EAS's GPU slicing: a whole card
        return self


PD_ENGINES = ("vllm", "vllm-cpu", "vllm-ascend")
ROLES = ("prefill", "decode")


class PdRole(_Strict):
    """One side of a prefill/decode-separated service."""

    instance: int = Field(default=1, ge=1, le=MAX_INSTANCES)
    gpu: int = CARD_COUNT
    npu: int = CARD_COUNT
    tensor_parallel_size: int = Field(default=1, ge=1, le=MAX_CARDS)
    autoscaler: Autoscaler | None = Field(
        default=None, description="This role's own autoscaler; none: the service's."
    )


class PdRouter(_Strict):
    """How the gateway, which is the router, picks an instance of each role."""

    prefill_policy: Literal[
        "round_robin", "least_outstanding", "prefix_cache", "kv_cache_load", "session"
    ] = "least_outstanding"
    decode_policy: Literal["round_robin", "least_outstanding"] = "least_outstanding"


class Pd(_Strict):
    prefill: PdRole
    decode: PdRole
    # Which KV-cache transfer the engines use; each engine adapter knows its own.
    kv_connector: str = Field(default="ExampleConnector", pattern=SAFE_WORD)
    router: PdRouter = PdRouter()
    # When no prefill instance can serve: fail the request (503) or let decode do it all.
    on_prefill_failure: Literal["fail", "decode_only"] = "fail"
    # vllm-ascend only: the rank-table deployment of ModelArts (seeds/000).
    rank_table: bool = False

    def role(self, name: str) -> PdRole:
        return self.prefill if name == "prefill" else self.decode


class Llm(LlmParallelism):
    # Checked by _known_engine (its message names the choices); the schema lists them.
    engine: str = Field(
        json_schema_extra={"enum": list(ENGINES)},
        description="vllm (NVIDIA GPUs), vllm-cpu (no cards), vllm-ascend (Ascend NPUs), "
        "sglang, bladellm, tgi, paddlenlp (GPUs), or custom (the given image and command).",
    )
    model: str | None = Field(
        default=None,
        description="A model-store name (tiny-llama, org/model), an absolute path in the "
        "container, an oss://, obs:// or s3:// URI, or a hub reference "
        "(hf://org/name[@revision], modelscope://org/name[@revision]) staged onto the node.",
    )
    hub_token: str | None = Field(
        default=None, min_length=1, max_length=512, json_schema_extra={"format": "password"},
        description="An access token for the hub models of this spec (private or gated "
        "repositories); stored sealed, never shown again, never given to the engine.",
    )  # fmt: skip
    served_model_name: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][\w./:-]{0,127}$",
        description="The name callers put in model; none: the service name.",
    )  # fmt: skip
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=MAX_CARDS,
        description="Cards one copy of the model is split over; at most the cards per instance.",
    )  # fmt: skip
    max_model_len: int | None = Field(
        default=None, ge=16, le=MAX_TOKENS,
        description="The longest context, in tokens; none: the model's own.",
    )  # fmt: skip
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1,
        description="Share of each GPU's memory the engine may take; none: the engine's default.",
    )  # fmt: skip
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    enable_chunked_prefill: bool | None = None
    chunked_prefill_size: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS,
        description="Tokens per prefill chunk (vLLM's --max-num-batched-tokens); none: the "
        "engine's default.",
    )  # fmt: skip
    quantization: str | None = Field(default=None, pattern=SAFE_WORD)
    kv_cache_dtype: str | None = Field(default=None, pattern=SAFE_WORD)
    dtype: Literal["auto", "float32", "float16", "bfloat16"] | None = None
    speculative: Speculative | None = None
    lora: Lora | None = Field(
        default=None,
        description="LoRA adapters of the model, served by the same instances; each is a "
        "model callers name '<model>:<adapter>'.",
    )
    pd: Pd | None = None
    # Engine flags Wharf has no field for: {"--block-size": 16, "--enable-prefix-caching": true}
    options: dict[str, OptionValue] = Field(default={}, max_length=128)
    extra_args: list[str] = Field(default=[], max_length=256)

    @field_validator("options")
    @classmethod
    def _flags(cls, value: dict[str, OptionValue]) -> dict[str, OptionValue]:
        bad = [k for k in value if not re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*", k)]
        if bad:
            raise ValueError(f"option names are flags like --block-size; not {', '.join(bad)}")
        return value

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in ENGINES:
            raise ValueError(f"unknown engine {value!r}; choose one of {', '.join(ENGINES)}")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        return None if value is None else model_reference(value)


class ServiceSpec(
    CloudOnlyTop,
    ServiceAccess,
    ServiceLabels,
    CronScaled,
    WarmUp,
    Queued,
    RequestLogged,
    Unitized,
):
    name: str = Field(
        json_schema_extra={"pattern": NAME_PATTERN.pattern},
        description="Starts with a letter; up to 63 letters, digits, '-' and '_'.",
    )
    containers: list[Container] = Field(
        default=[], max_length=8,
        description="containers[0] is the main one (the engine with llm): its port takes the "
        "traffic. Any others (sidecars) run beside it in the same instance and reach it "
        "on localhost.",
    )  # fmt: skip
    storage: list[StorageEntry] = Field(default=[], max_length=64)
    metadata: Metadata = Metadata()
    llm: Llm | None = None
    rolling_strategy: RollingStrategy = RollingStrategy()
    health_check: HealthCheck = Field(
        default=HealthCheck(),
        description="Readiness probe: failing it only takes an instance out of routing; "
        "health_check.liveness, failing, restarts it.",
    )
    dockerAuth: DockerAuth = None  # noqa: N815 (EAS spelling)
    autoscaler: Autoscaler | None = Field(
        default=None,
        description="Scale on load between min and max instances (each role on its own "
        "signals in a prefill/decode service); metadata.instance is the count it starts with.",
    )
    networking: Networking | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_PATTERN.fullmatch(value):
            raise ValueError(
                "a service name starts with a letter and has up to 63 letters, digits, '_' or '-'"
            )
        if value.lower() in RESERVED_NAMES:
            raise ValueError(f"{value!r} is a name the API uses for a route; choose another name")
        return value

    @property
    def served_model_names(self) -> tuple[str, ...]:
        if self.llm and self.llm.served_model_name:
            return (self.llm.served_model_name,)
        return ()

    def spec_hash(self) -> str:
        """Changes whenever anything that shapes an instance changes. Instance counts do not
        shape an instance: scaling adds or removes instances and leaves the others alone; nor
        do rolling_strategy, health_check and the grace period, applied to running instances,
        nor dockerAuth (only a pull uses it), nor llm.hub_token (only staging does), nor the
        autoscaler and the routing policy.
        metadata.resource does (instances move); unset, it leaves earlier hashes as they were,
        and so does an rpc section left empty once the routing policy is set aside (one whose
        fields were all null rolls its instances once, on the upgrade that added this), and
        so does llm.lora unset. Nor do the LoRA adapters of an engine that loads them while it
        runs (RUNTIME_LORA_ENGINES): workers.models.adapters applies them to running instances."""
        data = self.model_dump(mode="json", exclude={
            "rolling_strategy", "health_check", "dockerAuth", "autoscaler", "cronscaler",
            "warm_up_data_path",  # replayed to a new instance: it shapes none
            "networking", "token", "generate_token", "labels",  # the gateway's and the API's
            "queue",  # the queues' bounds: the API's and the gateways'; they shape no instance
            "request_log",  # the gateways' (contracts.spec_request_log): it shapes no instance
            *CLOUD_TOP,  # EAS's cloud-only fields (contracts.spec_cloud): they shape nothing
        })  # fmt: skip
        if data.get("llm"):  # only staging uses it: a new token is used by the next staging
            del data["llm"]["hub_token"]
        for key in ("instance", "termination_grace_period", *CLOUD_METADATA, *UNSHAPING,
                    *WEB_METADATA, *GROUP_METADATA):  # fmt: skip
            data["metadata"].pop(key, None)
        for key, unset in {**SHAPING_UNLESS, **JOB_SHAPING_UNLESS}.items():  # unset: as before
            if data["metadata"].get(key) in unset:
                del data["metadata"][key]
        drop_unset_probes(data["containers"])  # the hashes from before probes existed
        drop_unset_unit(data)  # and from before instances spanned hosts
        drop_unset_prepare(data["containers"])  # and from before prepare existed
        for entry in data["storage"]:  # properties: a label for EAS's console, nothing more
            entry.pop("properties", None)
            unset_storage_fields(entry)  # newer fields, unset: earlier hashes stay as they were
        if data["metadata"]["resource"] is None:
            del data["metadata"]["resource"]
        rpc = data["metadata"]["rpc"] or {}
        # not what runs: the gateway's, and what acts on running instances
        for key in ("routing", "session_header", "enable_sigterm", "worker_threads", *CLOUD_RPC):
            rpc.pop(key, None)
        if not any(value is not None for value in rpc.values()):
            data["metadata"]["rpc"] = None
        llm = data.get("llm") or {}
        if "lora" in llm and llm["lora"] is None:  # unset: the hashes from before it existed
            del llm["lora"]
        elif llm.get("engine") in RUNTIME_LORA_ENGINES:  # adapters change in place
            llm["lora"].pop("adapters")
        pd = llm.get("pd")
        for role in ("prefill", "decode"):
            if pd:
                pd[role].pop("instance", None)
                pd[role].pop("autoscaler", None)
        canonical = json.dumps(data, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# The tags pydantic puts in an error's location for each member of OptionValue's union.
UNION_TAGS = frozenset({"str", "int", "float", "bool", "constrained-str", "constrained-int",
                        "constrained-float"})  # fmt: skip
OPTION_VALUE = "give a string, a whole number below 2**63, a number up to 1e15, or true/false"


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if part in UNION_TAGS:
            break
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "spec"


def _message(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "Wharf does not support this field (yet); remove it"
    if error["loc"] and error["loc"][-1] in UNION_TAGS:
        return OPTION_VALUE
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


GPU_ENGINES = ("vllm", "sglang", "bladellm", "tgi", "paddlenlp")


def parse_spec(data: Any) -> ServiceSpec:
    """The spec, or SpecError naming every bad field: the schema, then the rules that span
    sections."""
    from contracts.spec_rules import cross_checks  # they read this module's models

    spec = typed_spec(data)
    errors = cross_checks(spec)
    if errors:
        raise SpecError(errors)
    return spec


def typed_spec(data: Any) -> ServiceSpec:
    """The spec's schema alone (types, bounds, fields), for readers such as the routing
    snapshot that need its values but not the rules that decide whether it may deploy. An
    EAS instance type sizes the metadata the spec leaves unset (contracts.instance_types)."""
    if not isinstance(data, dict):
        raise SpecError({"spec": ["the spec must be a JSON object"]})
    try:
        return ServiceSpec.model_validate(sized(data))
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for error in exc.errors():
            messages = errors.setdefault(_path(error["loc"]), [])
            if (message := _message(dict(error))) not in messages:
                messages.append(message)
        raise SpecError(errors) from None
