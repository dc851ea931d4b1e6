"""The routing snapshot the control plane publishes to Redis for the gateway.

Redis layout:
- key ``SNAPSHOT_KEY`` holds the JSON of the whole snapshot (small: one entry per
  service), rewritten by the control plane after every change it makes;
- channel ``SNAPSHOT_CHANNEL`` receives the snapshot's ``version`` after each write,
  so gateways reload at once instead of waiting for their next poll.

Snapshot JSON::

    {
      "version": 17,                      # increases with every publish
      "services": {
        "<service name>": {
          "served_model_names": ["tiny"],  # OpenAI `model` values that reach it
          "token_digests": ["<hex>"],      # contracts.tokens.token_digest of each valid token
          "sealed_tokens": ["wharf-token:v1:…"],  # the same tokens sealed for the gateways
                                           # (contracts.token_sealing): EAS's signed calls
          "instances": [                   # only instances that passed their health check
            {"name": "<instance name>", "url": "http://127.0.0.1:32768",
             "adapters": ["sql"]}           # loaded there (absent: all of the service's)
          ],
          "rate_limit": 100,               # requests/s for the whole service: the lower of
                                           # metadata.rpc's and networking.gateway_policy's
          "max_queue_size": 64,            # requests outstanding per instance (with
                                           # worker_threads: waiting for a slot); null: no bound
          "worker_threads": 5,             # requests at one instance at once; null: no cap
          "concurrency_limit": 50,         # requests in the gateways for the whole service at
                                           # once (networking.gateway_policy); null: no cap
          "timeout": 600.0,                # seconds for the whole request, from its arrival
                                           # (metadata.rpc.keepalive); null: no bound
          "routing": "least_outstanding",  # | prefix_cache | kv_cache_load | session
          "session_header": "x-session-id",# the header routing "session" reads
          "scale_from_zero": false,        # autoscaler min 0: with no instance, hold the
                                           # request (gateway/routing/activation.py) until
                                           # one serves
          "adapters": ["sql", "chat"],     # LoRA adapters: models "<name>:<adapter>"
          "engine": "vllm",                # whose API its instances serve (contracts.engines:
                                           # "custom" for a given command): which routes the
                                           # EAS form reaches (contracts.engine_routes)
          "webservice": false,             # metadata.enable_webservice: its web UI is served
                                           # under /web/<service>/ (contracts.webapp)
          "job": false,                    # metadata.workload_type elasticjob: it takes no
                                           # calls (409 naming the job)
          "mirror": {"targets": ["qwen-next"], "ratio": 10},  # absent: none
                                           # (gateway.routing.mirror)
          "canary_weight": 10,             # a canary's share, %: its instances are those with
                                           # "track": "canary" (gateway.routing.canary); absent: 0
          "queue": {"window": 5}           # metadata.type Async: EAS form calls go to its queues,
                                           # each instance fed `window` items at most; absent: none
        }
      },
      "keys": {                            # API keys, by token digest
        "<hex digest>": {
          "id": "k7",                      # public id: usage and limit counters use it
          "services": ["qwen", "llama:sql"],  # services, or one adapter; null: every service
          "expires_at": 1795000000.0,      # epoch seconds; null: never
          "rpm": 600, "tpm": 100000, "max_concurrency": 8,  # null: unlimited
          "sealed_token": "wharf-token:v1:…"   # the key sealed (absent: it cannot sign)
        }
      },
      "groups": {                          # service groups (contracts.service_groups)
        "<group name>": {
          "mode": "customized",            # | "auto": shares follow ready instances
          "members": [{"service": "blue", "weight": 900}],  # released members only
          "session_headers": ["x-session-id"]  # a call with one sticks to one member
        }
      }
    }
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property

from contracts.service_groups import RoutedGroup

SNAPSHOT_KEY = "wharf:routing:snapshot"
SNAPSHOT_CHANNEL = "wharf:routing:changed"


@dataclass(frozen=True)
class RoutedInstance:
    name: str
    url: str
    role: str = ""  # "prefill" | "decode" in a prefill/decode-separated service
    # What its engine key derives from (contracts.engine_keys), where not its name: the pods
    # of one Kubernetes Deployment share one key, as they share one template.
    key: str = ""
    # The LoRA adapters its engine has loaded, where its node tracks them (workers.models.adapters);
    # None: every adapter of its service.
    adapters: tuple[str, ...] | None = None
    # "canary": an instance of the new version a canary release runs beside the stable one
    # (contracts.canary); "": the service's own.
    track: str = ""

    def serves(self, adapter: str) -> bool:
        return not adapter or self.adapters is None or adapter in self.adapters


@dataclass(frozen=True)
class PdRouting:
    """How the gateway routes a prefill/decode-separated service: prefill first (max_tokens=1),
    then decode, streamed back."""

    connector: str
    prefill_policy: str = "least_outstanding"  # | "round_robin" | RoutedService.routing's
    decode_policy: str = "least_outstanding"
    on_prefill_failure: str = "fail"  # | "decode_only"
    # What the connector needs of the router (contracts.engines.pd.router_hints), e.g.
    # {"kv_transfer_params": true} or {"request_id": "p2p_nccl"}.
    hints: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RequestLogRouting:
    """A service's request log as the gateways keep it (contracts.spec_request_log)."""

    keep_days: int
    max_body_bytes: int


DEFAULT_RATE_LIMIT = 100  # requests/s per service, as ModelArts defaults
DEFAULT_SESSION_HEADER = "x-session-id"


@dataclass(frozen=True)
class RoutedService:
    name: str
    served_model_names: tuple[str, ...] = ()
    token_digests: frozenset[str] = frozenset()
    instances: tuple[RoutedInstance, ...] = ()
    rate_limit: int = DEFAULT_RATE_LIMIT
    max_queue_size: int | None = None
    timeout: float | None = None
    worker_threads: int | None = None  # metadata.rpc.worker_threads: per instance
    concurrency_limit: int | None = None  # networking.gateway_policy: per service
    pd: PdRouting | None = None
    routing: str = "least_outstanding"
    session_header: str = DEFAULT_SESSION_HEADER
    scale_from_zero: bool = False
    adapters: tuple[str, ...] = ()  # LoRA adapters its engines serve
    # Whose API its instances serve ("custom": the user's own); "" from a control plane that
    # predates the field, which the gateway treats as an engine it does not know.
    engine: str = ""
    # metadata.enable_webservice: the gateway serves its web UI to signed-in browsers.
    webservice: bool = False
    # metadata.workload_type elasticjob (contracts.spec_job): a job takes no calls.
    job: bool = False
    # Its tokens sealed for the gateways (contracts.token_sealing), for EAS's signed calls;
    # a token issued before Wharf sealed them has none, and is presented in clear only.
    sealed_tokens: frozenset[str] = frozenset()
    # EAS's ServiceMirror: `mirror_ratio` % of its calls are also sent to each service of
    # `mirror_targets`, whose answers are discarded (gateway.routing.mirror).
    mirror_targets: tuple[str, ...] = ()
    mirror_ratio: int = 0
    # A canary release's share of its calls, percent: its "canary" instances take that share,
    # the others the rest (gateway.routing.canary).
    canary_weight: int = 0
    # metadata.type Async: calls in EAS form go to its input queue and its sink
    # (gateway.queues); the gateways feed its instances `queue_window` items each at most.
    queued: bool = False
    queue_window: int = 0
    # A Standard service with requests of OpenAI batches waiting or running: the gateways
    # feed them to its instances as they feed an Async service's queue (gateway.queues).
    fed: bool = False
    # `request_log` enabled: the gateways keep its calls' requests and answers.
    request_log: RequestLogRouting | None = None

    def answers_to(self, model: str) -> bool:
        """Whether `model` names its base model: its own name or a served one."""
        return model == self.name or model in self.served_model_names

    @property
    def model_names(self) -> tuple[str, ...]:
        """The names callers give its base model: the served ones, else its own."""
        return self.served_model_names or (self.name,)


ADAPTER_SEPARATOR = ":"  # "<model>:<adapter>" names an adapter of a service's model


@dataclass(frozen=True)
class ModelMatch:
    """What a `model` value names: a service, and one of its adapters ("" for the base)."""

    service: RoutedService
    adapter: str = ""


@dataclass(frozen=True)
class RoutedKey:
    """An API key: which services it may call, until when, and its own limits."""

    id: str
    services: frozenset[str] | None = None
    expires_at: float | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    sealed_token: str = ""  # the key sealed for the gateways ("": none, it cannot sign)

    def allows(self, service: str, now: float, adapter: str = "") -> bool:
        """Whether it may call `service`'s model, or its `adapter`: a scope entry names a
        whole service ("qwen") or one adapter of it ("qwen:sql")."""
        unexpired = self.expires_at is None or now < self.expires_at
        if self.services is None or service in self.services:
            return unexpired
        return (
            unexpired
            and bool(adapter)
            and f"{service}{ADAPTER_SEPARATOR}{adapter}" in (self.services)
        )

    def reaches(self, service: str) -> bool:
        """Whether its scope names the service or any adapter of it."""
        if self.services is None or service in self.services:
            return True
        return any(s.startswith(service + ADAPTER_SEPARATOR) for s in self.services)


@dataclass(frozen=True)
class Snapshot:
    version: int = 0
    services: dict[str, RoutedService] = field(default_factory=dict)
    keys: dict[str, RoutedKey] = field(default_factory=dict)  # by token digest
    # Entries from_json left out because they did not have the documented shape.
    unreadable: tuple[str, ...] = field(default=(), compare=False)
    # Service groups (contracts.service_groups), by name: their released members.
    groups: dict[str, RoutedGroup] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "services": {
                    name: _service_json(svc) for name, svc in sorted(self.services.items())
                },
                "keys": {
                    digest: {
                        "id": key.id,
                        "services": None if key.services is None else sorted(key.services),
                        "expires_at": key.expires_at,
                        "rpm": key.rpm,
                        "tpm": key.tpm,
                        "max_concurrency": key.max_concurrency,
                    }
                    | ({"sealed_token": key.sealed_token} if key.sealed_token else {})
                    for digest, key in sorted(self.keys.items())
                },
                "groups": {name: group.to_json() for name, group in sorted(self.groups.items())},
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Snapshot:
        """The snapshot; a service or key entry that does not have the documented shape is
        left out (see `unreadable`), so one bad entry never costs the gateways the rest."""
        data = json.loads(text)
        services, keys, unreadable = {}, {}, []
        for name, entry in data.get("services", {}).items():
            try:
                services[name] = _service_from(name, entry)
            except (KeyError, TypeError, ValueError):
                unreadable.append(f"service {name}")
        for digest, entry in data.get("keys", {}).items():
            try:
                keys[digest] = _key_from(entry)
            except (KeyError, TypeError, ValueError):
                unreadable.append(f"key {digest[:8]}…")
        groups = {}
        for name, entry in data.get("groups", {}).items():
            try:
                groups[name] = RoutedGroup.from_json(name, entry)
            except (KeyError, TypeError, ValueError):
                unreadable.append(f"group {name}")
        return cls(
            version=int(data.get("version", 0)), services=services, keys=keys,
            unreadable=tuple(unreadable), groups=groups,
        )  # fmt: skip

    @cached_property
    def services_by_token(self) -> dict[str, frozenset[str]]:
        """The services each service token (by digest) belongs to: who presents a token is
        known before the request names a service (a gateway reads no body of a stranger's)."""
        found: dict[str, set[str]] = {}
        for name, svc in self.services.items():
            for digest in svc.token_digests:
                found.setdefault(digest, set()).add(name)
        return {digest: frozenset(names) for digest, names in found.items()}

    def find_by_model(self, model: str) -> RoutedService | None:
        """The service a `model` value names: its service name first, else a served model name."""
        if model in self.services:
            return self.services[model]
        for svc in self.services.values():
            if model in svc.served_model_names:
                return svc
        return None

    def find_model(self, model: str) -> ModelMatch | None:
        """What a `model` value names: a service's base model (as find_by_model), else one of
        its adapters as "<service or served name>:<adapter>". A served name may itself hold
        the separator ("qwen:7b"), so the whole name is tried first."""
        service = self.find_by_model(model)
        if service is not None:
            return ModelMatch(service)
        base, separator, adapter = model.rpartition(ADAPTER_SEPARATOR)
        service = self.find_by_model(base) if separator else None
        if service is not None and adapter in service.adapters:
            return ModelMatch(service, adapter)
        return None


def _number(value, kind: type, optional: bool = True):
    """value when it is a JSON number of that kind (never a bool or a string), else ValueError."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float if kind is float else int):
        raise ValueError(f"{value!r} is not a number")
    return kind(value)


def _strings(values) -> tuple[str, ...]:
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise ValueError("not a list of strings")
    return tuple(values)


def _service_json(svc: RoutedService) -> dict:
    out: dict = {
        "served_model_names": list(svc.served_model_names),
        "token_digests": sorted(svc.token_digests),
        "sealed_tokens": sorted(svc.sealed_tokens),
        "instances": [_instance_json(i) for i in svc.instances],
        "rate_limit": svc.rate_limit,
        "max_queue_size": svc.max_queue_size,
        "timeout": svc.timeout,
        "worker_threads": svc.worker_threads,
        "concurrency_limit": svc.concurrency_limit,
        "pd": None if svc.pd is None else asdict(svc.pd),
        "routing": svc.routing,
        "session_header": svc.session_header,
        "scale_from_zero": svc.scale_from_zero,
        "adapters": list(svc.adapters),
        "engine": svc.engine,
        "webservice": svc.webservice,
        "job": svc.job,
    }
    if svc.queued:
        out["queue"] = {"window": svc.queue_window}
    if svc.fed:  # absent where unset: snapshots stay as they were
        out["fed"] = True
    if svc.mirror_targets:  # absent where unset: snapshots stay as they were
        out["mirror"] = {"targets": list(svc.mirror_targets), "ratio": svc.mirror_ratio}
    if svc.canary_weight:
        out["canary_weight"] = svc.canary_weight
    if svc.request_log is not None:
        out["request_log"] = asdict(svc.request_log)
    return out


def _instance_json(instance: RoutedInstance) -> dict:
    out: dict[str, str | list[str]] = {
        "name": instance.name, "url": instance.url, "role": instance.role,
    }  # fmt: skip
    if instance.key:  # absent where it is the name: snapshots stay as they were
        out["key"] = instance.key
    if instance.adapters is not None:
        out["adapters"] = list(instance.adapters)
    if instance.track:
        out["track"] = instance.track
    return out


def _service_from(name: str, entry: dict) -> RoutedService:
    pd = entry.get("pd")
    mirror = entry.get("mirror") or {}
    return RoutedService(
        name=name,
        served_model_names=_strings(entry.get("served_model_names", [])),
        token_digests=frozenset(_strings(entry.get("token_digests", []))),
        sealed_tokens=frozenset(_strings(entry.get("sealed_tokens", []))),
        instances=tuple(
            RoutedInstance(
                name=str(i["name"]),
                url=str(i["url"]),
                role=str(i.get("role", "")),
                key=str(i.get("key", "")),
                adapters=_strings(i["adapters"]) if "adapters" in i else None,
                track=str(i.get("track", "")),
            )  # fmt: skip
            for i in entry.get("instances", [])
        ),
        rate_limit=_number(entry.get("rate_limit", DEFAULT_RATE_LIMIT), int, optional=False),
        max_queue_size=_number(entry.get("max_queue_size"), int),
        timeout=_number(entry.get("timeout"), float),
        worker_threads=_number(entry.get("worker_threads"), int),
        concurrency_limit=_number(entry.get("concurrency_limit"), int),
        pd=PdRouting(**pd) if pd else None,
        routing=str(entry.get("routing", "least_outstanding")),
        session_header=str(entry.get("session_header", DEFAULT_SESSION_HEADER)),
        scale_from_zero=entry.get("scale_from_zero", False) is True,
        adapters=_strings(entry.get("adapters", [])),
        engine=str(entry.get("engine", "")),
        webservice=entry.get("webservice", False) is True,
        job=entry.get("job", False) is True,
        mirror_targets=_strings(mirror.get("targets", [])),
        mirror_ratio=_number(mirror.get("ratio", 0), int, optional=False),
        canary_weight=_number(entry.get("canary_weight", 0), int, optional=False),
        queued=isinstance(entry.get("queue"), dict),
        queue_window=_number((entry.get("queue") or {}).get("window", 0), int, optional=False),
        fed=entry.get("fed", False) is True,
        request_log=_request_log(entry.get("request_log")),
    )


def _request_log(entry: dict | None) -> RequestLogRouting | None:
    if not isinstance(entry, dict):
        return None
    return RequestLogRouting(
        keep_days=_number(entry["keep_days"], int, optional=False),
        max_body_bytes=_number(entry["max_body_bytes"], int, optional=False),
    )


def _key_from(entry: dict) -> RoutedKey:
    services = entry.get("services")
    return RoutedKey(
        id=str(entry["id"]),
        services=None if services is None else frozenset(_strings(services)),
        expires_at=_number(entry.get("expires_at"), float),
        rpm=_number(entry.get("rpm"), int),
        tpm=_number(entry.get("tpm"), int),
        max_concurrency=_number(entry.get("max_concurrency"), int),
        sealed_token=str(entry.get("sealed_token", "")),
    )
