"""Django settings, read only from environment variables (see the README's table).

A fresh checkout runs with no configuration: SQLite under WHARF_HOME and a
generated secret key kept in WHARF_HOME/secret_key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import socket
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from contracts import log_format
from contracts.env import envbool, envfloat, envint, envrange, envstr, secret
from contracts.hub_refs import ENDPOINTS
from contracts.instance_types import SHIPPED, Flavour, operator_table, use_table
from contracts.version import VERSION
from controlplane.sso.config import sign_in_problem
from controlplane.sso.mapping import parse_group_roles

BASE_DIR = Path(__file__).resolve().parent.parent
WHARF_HOME = Path(envstr("WHARF_HOME", str(BASE_DIR / ".wharf"))).resolve()
# It holds the secret key and the embedded database: made readable by its owner only.
if not WHARF_HOME.exists():
    WHARF_HOME.mkdir(parents=True, mode=0o700)


def _database(url: str) -> dict:
    if not url:
        WHARF_HOME.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": WHARF_HOME / "wharf.sqlite3",
            # Several processes (API, worker threads) write at once. WAL lets readers go on
            # during a write; a write transaction takes the lock when it begins (IMMEDIATE),
            # so two writers queue on the busy timeout instead of one failing at once with
            # "database is locked" when its read turns into a write.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL: unsupported scheme {parsed.scheme!r}; use postgresql://")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.path.lstrip("/"),
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,  # a kept session is checked before it is used again
    }


def _kept_key(name: str, filename: str, first) -> str:
    """NAME(_FILE), else a key kept in WHARF_HOME/<filename>, made once by `first()`."""
    value = secret(name)
    if value:
        return value
    path = WHARF_HOME / filename
    if not path.exists():
        WHARF_HOME.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)  # owner-only before the secret is in it
        path.write_text(first())
    return path.read_text().strip()


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def _derived_fernet_key(key: str) -> str:
    """A Fernet key of its own derived from `key` (a domain-separated hash)."""
    digest = hashlib.sha256(b"wharf: secrets at rest\0" + key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()


SECRET_KEY = _kept_key("WHARF_SECRET_KEY", "secret_key", lambda: secrets.token_urlsafe(48))
# Django's signing key may be rotated without logging everyone out: the old ones, comma-separated.
SECRET_KEY_FALLBACKS = [k for k in secret("WHARF_SECRET_KEY_FALLBACKS").split(",") if k]
# A deployment gives its keys in the environment (every process the same); `make run` keeps
# them in WHARF_HOME. One that gives WHARF_SECRET_KEY alone keeps working as before: its token
# key is that key, its secrets key is derived from it (set both to make them separate).
_GIVEN = bool(secret("WHARF_SECRET_KEY"))
# The HMAC key of token digests (API tokens, service tokens, API keys) and of the engines' keys,
# shared with the gateways: its own, so that rotating Django's key voids no token. An embedded
# install made before it existed starts it from the secret key, so its tokens keep working.
WHARF_TOKEN_KEY = secret("WHARF_TOKEN_KEY") or (
    SECRET_KEY if _GIVEN else _kept_key("WHARF_TOKEN_KEY", "token_key", lambda: SECRET_KEY)
)
# The Fernet key that encrypts the secrets in stored specs (controlplane.services.sealing);
# earlier ones, comma-separated, still decrypt until `manage.py rotate_secrets` re-encrypts.
WHARF_SECRETS_KEY = secret("WHARF_SECRETS_KEY") or (
    _derived_fernet_key(SECRET_KEY)
    if _GIVEN
    else _kept_key("WHARF_SECRETS_KEY", "secrets_key", _fernet_key)
)
WHARF_SECRETS_KEY_PREVIOUS = [
    k for k in secret("WHARF_SECRETS_KEY_PREVIOUS").split(",") if k.strip()
]
DEBUG = envbool("WHARF_DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in envstr("WHARF_ALLOWED_HOSTS", "*").split(",") if h.strip()]

# HTTPS (python -m controlplane with WHARF_TLS_CERT and WHARF_TLS_KEY, contracts.serving_tls):
# browsers are told to come back only over HTTPS (HSTS, on HTTPS answers only: Django's
# SecurityMiddleware) and the session and CSRF cookies are never sent in clear. The probes
# and /metrics (controlplane.machine_endpoints) answer before that middleware, unchanged.
# Without TLS (`make run`, http://127.0.0.1) none of it: a Secure cookie would not come back.
WHARF_TLS = bool(envstr("WHARF_TLS_CERT").strip())
SECURE_HSTS_SECONDS = envint("WHARF_HSTS_SECONDS", 31536000, minimum=0) if WHARF_TLS else 0
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = WHARF_TLS

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served here rather than from a CDN
    "controlplane.workspaces",
    "controlplane.audit",
    "controlplane.services",
    "controlplane.tokens",
    "controlplane.usage",
    "controlplane.nodes",
    "controlplane.benchmarks",
    "controlplane.eas_api",
    "controlplane.queues",
    "controlplane.batches",
    "controlplane.sso",
    "frontend",
    "launcher",
]

MIDDLEWARE = [
    # Probes and scrapes by pod IP, before the host check and any redirect.
    "controlplane.machine_endpoints.MachineEndpoints",
    # The database or Redis down: a 503 naming it (not a 500), from any layer below.
    "controlplane.outages.Outages",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "controlplane.audit.middleware.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

DATABASES = {"default": _database(envstr("DATABASE_URL"))}
# PostgreSQL connections each API process shares among its requests (controlplane.asgi); 0: a
# session of its own for each request. POOL_WAIT_S: how long a request waits for one, then
# gets the database's 503 (controlplane.outages).
WHARF_API_DB_POOL = envint("WHARF_API_DB_POOL", 16, minimum=0)
WHARF_API_DB_POOL_WAIT_S = 3.0

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
STATIC_ROOT = WHARF_HOME / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True  # serve app static files without a collectstatic step
# The console's own sign-in page (Django's auth views); signing out lands back on it.
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

# Single sign-on with OpenID Connect (controlplane.sso), on when an issuer and a client are
# given: the provider's endpoints come from its discovery document at sign-in; users are made
# at their first sign-in and given workspace roles from their groups (WHARF_OIDC_GROUP_ROLES,
# GROUP=WORKSPACE:ROLE,...; controlplane.sso.mapping). WHARF_LOCAL_LOGIN=false refuses every
# password sign-in (the console's and the admin's); API tokens are not affected.
WHARF_OIDC_ISSUER = envstr("WHARF_OIDC_ISSUER", "").strip().rstrip("/")
WHARF_OIDC_CLIENT_ID = envstr("WHARF_OIDC_CLIENT_ID", "").strip()
WHARF_OIDC_GROUPS_CLAIM = envstr("WHARF_OIDC_GROUPS_CLAIM", "groups")
WHARF_OIDC_GROUP_ROLES = parse_group_roles(envstr("WHARF_OIDC_GROUP_ROLES", ""))
WHARF_OIDC_LABEL = envstr("WHARF_OIDC_LABEL", "single sign-on")
WHARF_LOCAL_LOGIN = envbool("WHARF_LOCAL_LOGIN", True)
_SIGN_IN_PROBLEM = sign_in_problem(WHARF_OIDC_ISSUER, WHARF_OIDC_CLIENT_ID, WHARF_LOCAL_LOGIN)
if _SIGN_IN_PROBLEM:
    raise ValueError(_SIGN_IN_PROBLEM)
AUTHENTICATION_BACKENDS = [
    *(["django.contrib.auth.backends.ModelBackend"] if WHARF_LOCAL_LOGIN else []),
    *(["controlplane.sso.backend.SsoBackend"] if WHARF_OIDC_ISSUER else []),
]
# mozilla-django-oidc's own settings (its OIDC_OP_* endpoints: controlplane.sso.discovery).
OIDC_RP_CLIENT_ID = WHARF_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = secret("WHARF_OIDC_CLIENT_SECRET")
OIDC_RP_SCOPES = envstr("WHARF_OIDC_SCOPES", "openid email profile")
OIDC_RP_SIGN_ALGO = envstr("WHARF_OIDC_SIGN_ALGO", "RS256")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATE_CLASS = "controlplane.sso.views.SignInRequest"
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # eascmd with an access key pair; first: a token's check would take its header
        "controlplane.eas_api.v1_auth.AccessKeyOnV1",
        "controlplane.tokens.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.workspaces.access.WorkspaceRight"],
    "UNAUTHENTICATED_USER": None,
    # JSON only, with a size and depth bound; forms post to the console's own views.
    "DEFAULT_PARSER_CLASSES": ["controlplane.json_body.BoundedJSONParser"],
    # `?format=` naming no renderer: a 400 naming it, not a bare 404.
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": (
        "controlplane.tokens.api.negotiation.NamedFormatNegotiation"
    ),
    "EXCEPTION_HANDLER": "controlplane.services.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# The REST API's OpenAPI 3 schema, generated from the views (/api/schema/, /api/docs/).
SPECTACULAR_SETTINGS = {
    "TITLE": "Wharf API",
    "DESCRIPTION": "Deploy and serve LLM inference services. Authenticate with "
    "`Authorization: Bearer <API token>` (manage.py create_api_token). The service spec's "
    "own JSON Schema is at /api/v1/schema/spec.",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "OAS_VERSION": "3.1.0",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlplane.openapi.add_spec_schema",
    ],
}

# One format for every process (text, or JSON lines with WHARF_LOG_FORMAT=json), uvicorn's and
# Celery's loggers included; a bad WHARF_LOG_FORMAT or WHARF_LOG_LEVEL stops start-up here.
# No access lines from the API (django.request logs its 4xx and 5xx answers).
LOGGING = log_format.logging_config(
    log_format.log_format(), log_format.log_level(), access_log=False
)
LOGGING_CONFIG = "contracts.log_format.apply"  # dictConfig, and warnings as log lines
# Celery keeps that handler rather than putting its own format on the root logger.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Wharf ---------------------------------------------------------------------------------
# The broker and the routing snapshot share one Redis. `make run` starts an embedded one and
# sets REDIS_URL for every process it starts; a bare default points at a local server.
REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
# Console sign-in: failed attempts per username (and 3x that per address) within the window, s.
WHARF_SIGNIN_ATTEMPTS = envint("WHARF_SIGNIN_ATTEMPTS", 10)
WHARF_SIGNIN_WINDOW = envint("WHARF_SIGNIN_WINDOW", 300)


def _broker_url(redis_url: str) -> str:
    """Kombu spells redis-py's unix://PATH?db=N as redis+socket://PATH?virtual_host=N."""
    if not redis_url.startswith("unix://"):
        return redis_url
    path, _, query = redis_url.removeprefix("unix://").partition("?")
    db = parse_qs(query).get("db", ["0"])[0]
    return f"redis+socket://{path}?virtual_host={db}"


CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", _broker_url(REDIS_URL))

# docker | process | kubernetes | "" (auto: docker when a daemon answers, else process).
WHARF_RUNTIME = envstr("WHARF_RUNTIME", "")
# WHARF_RUNTIME=kubernetes: the cluster (a kubeconfig file; unset: the pod's own service
# account), the namespace Wharf's objects live in, and how they are rendered (workers.kube).
WHARF_KUBECONFIG = envstr("WHARF_KUBECONFIG", "")
WHARF_K8S_NAMESPACE = envstr("WHARF_K8S_NAMESPACE", "default")
WHARF_K8S_GPU_RESOURCE = envstr("WHARF_K8S_GPU_RESOURCE", "nvidia.com/gpu")
WHARF_K8S_NPU_RESOURCE = envstr("WHARF_K8S_NPU_RESOURCE", "huawei.com/Ascend910")
WHARF_K8S_STAGER_IMAGE = envstr("WHARF_K8S_STAGER_IMAGE", f"wharf/wharf:{VERSION}")
WHARF_K8S_MODEL_CLAIM = envstr("WHARF_K8S_MODEL_CLAIM", "")
WHARF_K8S_PRESTOP_SECONDS = envint("WHARF_K8S_PRESTOP_SECONDS", 5)
WHARF_K8S_PROGRESS_DEADLINE = envint("WHARF_K8S_PROGRESS_DEADLINE", 600)
WHARF_K8S_KV_CLAIM = envstr("WHARF_K8S_KV_CLAIM", "")
WHARF_K8S_STORAGE_SECRET = envstr("WHARF_K8S_STORAGE_SECRET", "")
WHARF_K8S_ENGINE_TLS_SECRET = envstr("WHARF_K8S_ENGINE_TLS_SECRET", "")
WHARF_K8S_CLUSTER_DOMAIN = envstr("WHARF_K8S_CLUSTER_DOMAIN", "cluster.local")
WHARF_MODEL_DIR = Path(envstr("WHARF_MODEL_DIR", str(WHARF_HOME / "models"))).resolve()
WHARF_INSTANCE_LOG_DIR = WHARF_HOME / "instances"
# Object-storage models staged on this node (keyed by endpoint, bucket and prefix), and hub
# models (in its hub/ folder, by hub, repository and commit).
WHARF_CACHE_DIR = Path(envstr("WHARF_CACHE_DIR", str(WHARF_HOME / "cache"))).resolve()
# Writable object-storage mounts (readOnly: false): each instance's copy, and how often what
# it adds or changes there is uploaded back (workers.models.writable_storage).
WHARF_WRITABLE_DIR = WHARF_HOME / "writable"
WHARF_STORAGE_SYNC_SECONDS = envint("WHARF_STORAGE_SYNC_SECONDS", 60)
# The hubs hf:// and modelscope:// models are staged from: a mirror's address where nodes sit
# behind one (https://hf-mirror.com, an internal proxy).
WHARF_HF_ENDPOINT = envstr("WHARF_HF_ENDPOINT", ENDPOINTS["hf"])
WHARF_MODELSCOPE_ENDPOINT = envstr("WHARF_MODELSCOPE_ENDPOINT", ENDPOINTS["modelscope"])
WHARF_VLLM_VENV = Path(
    envstr("WHARF_VLLM_VENV", str(Path.home() / ".cache" / "wharf" / "vllm-cpu-venv"))
)
WHARF_VLLM_CPU_IMAGE = envstr("WHARF_VLLM_CPU_IMAGE", "wharf/vllm-cpu:0.32.0")
# Each engine's front (gateway.front), the one door to it on a node, checks its engine key;
# on Docker it runs in this image beside the engine's container. Prometheus reads the
# engines' metrics pages through it with this token (unset: only Wharf reads them).
WHARF_FRONT_IMAGE = envstr("WHARF_FRONT_IMAGE", f"wharf/wharf:{VERSION}")
WHARF_ENGINE_METRICS_TOKEN = envstr("WHARF_ENGINE_METRICS_TOKEN", "")
# GET /metrics on the API (controlplane.metrics.exposition) answers only this bearer token;
# unset, no one (403).
WHARF_API_METRICS_TOKEN = secret("WHARF_API_METRICS_TOKEN")
# Images the platform vouches for (comma-separated references): a spec naming one runs no code
# of the tenant's choosing (contracts.grants.tenant_code). The engines' default images always do.
WHARF_APPROVED_IMAGES = tuple(
    image.strip() for image in envstr("WHARF_APPROVED_IMAGES", "").split(",") if image.strip()
)


def _instance_types(path: str) -> dict[str, Flavour]:
    """The instance types EAS specs may name (contracts.instance_types): the shipped table,
    with the operator's JSON file on top. A file that cannot be read or is wrong stops
    start-up, naming the variable."""
    if not path:
        return dict(SHIPPED)
    try:
        return operator_table(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"WHARF_INSTANCE_TYPES_FILE {path}: {exc}") from None


# EAS instance types and ModelArts flavours beyond the shipped ones (a JSON file, see README):
# they fill metadata.cpu, memory and gpu|npu of specs that name them and leave those unset.
WHARF_INSTANCE_TYPES = _instance_types(envstr("WHARF_INSTANCE_TYPES_FILE", ""))
use_table(WHARF_INSTANCE_TYPES)  # every spec this process reads is sized with it
# What an instance whose spec names no memory or CPU may use, per card it holds (once without
# cards); the tasks (processes and threads) it may run, likewise; the largest memory-backed
# empty_dir (contracts.limits). A bad value stops start-up here, naming the variable.
WHARF_DEFAULT_MEMORY_MB = envint("WHARF_DEFAULT_MEMORY_MB", 16384, minimum=64)
WHARF_DEFAULT_CPUS = envfloat("WHARF_DEFAULT_CPUS", 8.0, minimum=0.01)
WHARF_PIDS_LIMIT = envint("WHARF_PIDS_LIMIT", 4096, minimum=64)
WHARF_MEMORY_EMPTY_DIR_MAX_MB = envint("WHARF_MEMORY_EMPTY_DIR_MAX_MB", 8192, minimum=1)
# This host as a node of the fleet: its name, the address other machines (the gateway) use
# to reach instances published on it, and labels for placement (`gpu=h200,zone=a`).
WHARF_NODE_NAME = envstr("WHARF_NODE_NAME", socket.gethostname())
WHARF_NODE_ADDRESS = envstr("WHARF_NODE_ADDRESS", "127.0.0.1")
WHARF_NODE_LABELS = envstr("WHARF_NODE_LABELS", "")
WHARF_NODE_HEARTBEAT = envint("WHARF_NODE_HEARTBEAT", 10)  # seconds between heartbeats
WHARF_NODE_GRACE = envint("WHARF_NODE_GRACE", 30)  # silent this long: not_ready
WHARF_NODE_EVICT = envint("WHARF_NODE_EVICT", 60)  # and this much longer: instances move
WHARF_BACKOFF_BASE = envint("WHARF_BACKOFF_BASE", 10)  # first restart delay of a crashed engine
WHARF_BACKOFF_MAX = envint("WHARF_BACKOFF_MAX", 300)  # the delay doubles up to this
WHARF_JOB_RETRIES = envint("WHARF_JOB_RETRIES", 3)  # a job instance's failed runs retried
# Ports the scheduler gives prefill/decode instances on their node (serving and KV side
# channel), below Linux's ephemeral range so nothing else takes them by chance.
WHARF_PD_PORTS = envrange("WHARF_PD_PORTS", (30000, 32767))
WHARF_RECONCILE_INTERVAL = envint("WHARF_RECONCILE_INTERVAL", 30)
# Every host runs beat; one leads and sends the fleet-wide periodic tasks (workers.beat): its
# lease in Redis lasts this long, so a dead leader is replaced within 1.25 times it.
WHARF_BEAT_LEASE_S = envfloat("WHARF_BEAT_LEASE_S", 8.0, minimum=1.0)
WHARF_HEALTH_TIMEOUT = envint("WHARF_HEALTH_TIMEOUT", 900)
WHARF_GATEWAY_URL = envstr("WHARF_GATEWAY_URL", "http://127.0.0.1:9000")
# Traces (gateway.observe.tracing): the OTLP/HTTP collector the gateway sends its spans to, and the
# address the engines reach it at, which vLLM's --otlp-traces-endpoint is rendered with
# (contracts.engines.vllm); "" : engines trace nothing.
WHARF_OTLP_ENDPOINT = envstr("WHARF_OTLP_ENDPOINT") or envstr("OTEL_EXPORTER_OTLP_ENDPOINT")
WHARF_ENGINE_OTLP_ENDPOINT = envstr("WHARF_ENGINE_OTLP_ENDPOINT") or WHARF_OTLP_ENDPOINT
# EAS's management API (/api/v2/): the region its answers name; any ClusterId is this Wharf.
WHARF_EAS_REGION = envstr("WHARF_EAS_REGION", "local")

# OpenAI's Batch API (controlplane.batches): where files are kept, and its bounds.
WHARF_BATCH_DIR = Path(envstr("WHARF_BATCH_DIR", str(WHARF_HOME / "files"))).resolve()
# An S3-compatible bucket instead of the folder (s3:// oss:// obs://bucket/prefix; endpoint and
# keys from WHARF_<SCHEME>_*, as for models): controlplane.batches.files.
WHARF_BATCH_STORE = envstr("WHARF_BATCH_STORE").strip()
WHARF_BATCH_FILE_MAX_BYTES = envint("WHARF_BATCH_FILE_MAX_BYTES", 200 * 1024 * 1024)
WHARF_BATCH_MAX_LINES = envint("WHARF_BATCH_MAX_LINES", 50_000)
WHARF_BATCH_MAX_IN_FLIGHT = envint("WHARF_BATCH_MAX_IN_FLIGHT", 10)
# Queued items (Async items and batch requests not yet answered) a workspace may have when
# its admins set no quota of its own (quotas.queued_items); 0: no bound.
WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE = envint("WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE", 100_000)
# Requests of batches an instance of a Standard service works on at once, at most (its
# metadata.rpc.worker_threads when set).
WHARF_BATCH_WINDOW = envint("WHARF_BATCH_WINDOW", 4)
