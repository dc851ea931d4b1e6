"""The engine routes a caller reaches through the EAS form (/api/predict/<service>/<path>), per
engine, and how the gateway reads each: pure data, below both planes (the gateway enforces it,
the console may show it).

An engine serves more than inference: vLLM's runtime LoRA loading (the node's alone), its
dev-mode routes (`VLLM_SERVER_DEV_MODE=1`: /collective_rpc runs a method on every worker,
/sleep frees the weights), SGLang's weight updates. A service's token or API key is a right to
run the model, not to administer its engine, so for the engines Wharf renders only the
inference routes are forwarded, each read as the OpenAI form reads it: its `max_tokens` (and
`n`, `best_of`) charged against the key's tokens per minute, its `usage` metered. Routes Wharf
cannot meter are left out (vLLM's /invocations dispatches to any of the others by the body's
shape; /tokenize and /detokenize are no inference; TGI's /generate reports no usage unless
asked), so a caller uses the route that names what it runs.

A custom engine (the user's own image or command) has an API Wharf does not know, and the EAS
form is how EAS callers reach it: every path is forwarded but the known administrative ones of
the servers such a command may run (vLLM, SGLang), and its OpenAI routes are read as such.
"""

from __future__ import annotations

from dataclasses import dataclass

# How the gateway reads a route's request and answer.
GENERATION = "generation"  # completions, chat: max_tokens x max(n, best_of), usage in streams
RESPONSES = "responses"  # the Responses API: max_output_tokens, usage input/output tokens
POOLING = "pooling"  # embeddings, scores, reranking, classification: prompt tokens
LISTING = "listing"  # a read-only GET (models, health): nothing to meter
OPAQUE = "opaque"  # a custom engine's own route: charged on its body's size
# Kinds whose body is an OpenAI-style JSON object the gateway parses and checks.
PARSED_KINDS = frozenset({GENERATION, RESPONSES, POOLING})

POST = frozenset({"POST"})
GET = frozenset({"GET", "HEAD"})
ANY_METHOD = frozenset({"GET", "HEAD", "POST"})  # what the EAS form accepts


@dataclass(frozen=True)
class EngineRoute:
    path: str  # decoded and normalised, as matched and as the engine is called on
    kind: str
    methods: frozenset[str]


def _routes(methods: frozenset[str], kind: str, *paths: str) -> dict[str, EngineRoute]:
    return {path: EngineRoute(path, kind, methods) for path in paths}


# What every engine Wharf renders serves: OpenAI's completions and chat, and the model list.
_OPENAI = {
    **_routes(POST, GENERATION, "/v1/completions", "/v1/chat/completions"),
    **_routes(GET, LISTING, "/v1/models"),
}
# vLLM's OpenAI-compatible server (vllm/entrypoints/openai/api_server.py), its pooling and
# scoring routes included.
_VLLM = {
    **_OPENAI,
    **_routes(POST, RESPONSES, "/v1/responses"),
    **_routes(POST, POOLING, "/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score"),
    **_routes(POST, POOLING, "/rerank", "/v1/rerank", "/v2/rerank"),
    **_routes(GET, LISTING, "/health"),
}
# Text Generation Inference's OpenAI-compatible Messages API and its read-only routes.
_TGI = {**_OPENAI, **_routes(GET, LISTING, "/health", "/info")}
# SGLang's OpenAI-compatible routes (sglang/srt/entrypoints/http_server.py); its native
# /generate answers no OpenAI usage, so it is not metered and not forwarded.
_SGLANG = {
    **_OPENAI,
    **_routes(POST, POOLING, "/v1/embeddings"),
    **_routes(GET, LISTING, "/health"),
}
# An engine name this gateway does not know (a newer control plane's): the OpenAI form's.
_UNKNOWN = {**_OPENAI, **_routes(POST, POOLING, "/v1/embeddings")}

CUSTOM = "custom"
ALLOWED: dict[str, dict[str, EngineRoute]] = {
    "vllm": _VLLM,
    "vllm-cpu": _VLLM,
    "vllm-ascend": _VLLM,
    "sglang": _SGLANG,
    "tgi": _TGI,
    "bladellm": _OPENAI,
    "paddlenlp": _OPENAI,
}

# Never forwarded to a custom engine, with everything under them: the node's runtime LoRA
# routes (workers.models.adapters), vLLM's and SGLang's administrative and dev-mode routes, and the
# engine's metrics (the node and the operator's Prometheus read them, not callers).
CLOSED = (
    "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/adapters",
    "/load_lora_adapter", "/unload_lora_adapter",
    "/collective_rpc", "/server_info", "/get_server_info", "/get_internal_state",
    "/set_internal_state", "/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache",
    "/flush_cache", "/sleep", "/wake_up", "/is_sleeping", "/pause", "/resume", "/is_paused",
    "/pause_generation", "/continue_generation", "/start_profile", "/stop_profile",
    "/scale_elastic_ep", "/is_scaling_elastic_ep", "/update_weights", "/update_weight_version",
    "/update_weights_from_disk", "/update_weights_from_distributed",
    "/update_weights_from_tensor", "/init_weights_update_group", "/init_weight_transfer_engine",
    "/get_world_size", "/release_memory_occupation", "/resume_memory_occupation",
    "/start_expert_distribution_record", "/stop_expert_distribution_record",
    "/dump_expert_distribution_record", "/configure_logging", "/abort_request",
    "/abort_requests", "/slow_down", "/metrics",
)  # fmt: skip


def engine_route(engine: str, path: str) -> EngineRoute | None:
    """The route `path` (decoded, normalised, no trailing slash but "/") reaches on `engine`,
    or None when callers may not reach it there."""
    if engine != CUSTOM:
        return ALLOWED.get(engine, _UNKNOWN).get(path)
    if closed(path):
        return None
    return _VLLM.get(path) or EngineRoute(path, OPAQUE, ANY_METHOD)


def closed(path: str) -> bool:
    """Whether `path` is or lies under a closed route. Compared without case: a custom
    server may match routes so (Windows', ASP.NET's), and none of these has a twin in
    another case."""
    lowered = path.lower()
    return any(lowered == route or lowered.startswith(route + "/") for route in CLOSED)


def inference_paths(engine: str) -> tuple[str, ...]:
    """The paths callers reach on a known engine, for error messages (custom: none listed)."""
    if engine == CUSTOM:
        return ()
    return tuple(sorted(ALLOWED.get(engine, _UNKNOWN)))
