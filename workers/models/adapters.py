"""LoRA adapters on a node: each service's adapters in one folder of the node, and the running
engines kept loaded with what the service's spec lists, without a restart.

The folder (`adapters_dir`: <WHARF_HOME>/adapters/<service>) holds one subfolder per adapter,
named for the adapter and where it comes from (contracts.engines.models.adapter_folder),
filled from the node's model store or its cache (object storage, hubs) by hard links (a copy across
file systems). Engines see the whole folder (a container at /adapters), so an adapter the node
adds is readable by an engine that started before it.

An instance starts with the adapters of the spec it is placed with (`--lora-modules`); the
starter records them in `Instance.adapters`. When the service's spec changes its adapters
(a new version with the same spec hash: they are not part of it for these engines), the agent
of each node syncs its ready instances: it reads what the engine has loaded (`GET /v1/models`,
an adapter's `parent` is its base), unloads what the spec no longer lists and loads what it
lists anew (vLLM's `/v1/unload_lora_adapter` and `/v1/load_lora_adapter`, which
VLLM_ALLOW_RUNTIME_LORA_UPDATING turns on and only the node reaches: the gateway forwards no
caller there). The engine keeps running throughout. `Instance.adapters` then says which are
loaded and, for those that failed, why; the gateways route an adapter's calls only to
instances that have it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
from django.conf import settings

from contracts import engine_tls
from contracts.engines.models import adapter_folder, locate_adapter
from contracts.hub_refs import is_hub_ref
from contracts.object_store import StagingError, source_from_env
from contracts.spec import RUNTIME_LORA_ENGINES, ServiceSpec
from contracts.spec_models import Adapter
from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance
from controlplane.services.routing import publish_snapshot
from workers.models.hub import HubError
from workers.models.hub_pins import VersionPins
from workers.models.provisioning import stage_hub_model
from workers.models.storage import stage
from workers.runtimes import InstanceError, ObservedInstance, Runtime

log = logging.getLogger(__name__)
RETRY_S = 30.0  # a failed load is tried again after this long
TIMEOUT_S = 120.0  # loading an adapter reads its weights


def adapters_dir(service: str) -> Path:
    return settings.WHARF_HOME / "adapters" / service


def managed(spec: ServiceSpec | None) -> bool:
    """Whether the node keeps the spec's adapters loaded while its engines run."""
    llm = spec.llm if spec else None
    return bool(llm and llm.lora is not None and llm.engine in RUNTIME_LORA_ENGINES)


def started_with(spec: ServiceSpec, generation: int) -> dict:
    """Instance.adapters of an instance that starts now: the spec's adapters, as its command
    line loads them."""
    adapters = spec.llm.lora.adapters if spec.llm and spec.llm.lora else []
    return {"generation": generation, "loaded": [a.name for a in adapters], "failed": {}}


class AdapterError(Exception):
    """An adapter this node cannot provide: the message says why."""


def provide(adapter: Adapter, folder: Path, fetch: Callable[[str], Path]) -> None:
    """Put `adapter` in the service's folder (nothing for an absolute path, which a mount
    provides): from object storage or a hub (`fetch(ref)`: its folder in the node's cache),
    or from the model store. Raises AdapterError."""
    ref = adapter.model
    if ref.startswith("/"):
        return
    target = folder / adapter_folder(adapter.name, ref)
    if target.is_dir():
        return
    if "://" in ref:
        source = fetch(ref)
    else:
        source = settings.WHARF_MODEL_DIR / ref
        if not source.is_dir():
            raise AdapterError(f"{ref!r} is not in this node's model store")
    folder.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=folder))
    try:
        shutil.copytree(source, building, copy_function=_link_or_copy, dirs_exist_ok=True)
        os.chmod(building, 0o755)  # an engine container may run as another user
        os.rename(building, target)
    except OSError as exc:
        shutil.rmtree(building, ignore_errors=True)
        if not target.is_dir():  # else another instance's sync made it meanwhile
            raise AdapterError(f"cannot copy it into {folder}: {exc.strerror}") from None


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def forget(service: str) -> None:
    """The service's folder, once none of its instances runs here."""
    shutil.rmtree(adapters_dir(service), ignore_errors=True)


def due(row: Instance, now: float) -> bool:
    """A ready instance whose adapters are not yet those of its service's spec, or that has
    one that failed to load a while ago."""
    state = row.adapters or {}
    if not state:  # not tracked: its engine does not change adapters while it runs
        return False
    if state.get("generation") != row.service.generation:
        return True
    return bool(state.get("failed")) and now - float(state.get("at") or 0) >= RETRY_S


def sync(row: Instance, found: ObservedInstance, runtime: Runtime) -> set[str]:
    """Load and unload on the instance's engine until it has the adapters of its spec; the
    services whose routing changed."""
    generation = row.service.generation
    spec = row.placed_spec()
    if row.state != InstanceState.READY or not found.url or not managed(spec):
        return set()
    assert spec is not None and spec.llm is not None and spec.llm.lora is not None
    folder = adapters_dir(row.service.name)
    placement = replace(runtime.placement(), adapters_dir=str(folder))
    headers = {"Authorization": f"Bearer {row.engine_key()}"}
    failed: dict[str, str] = {}
    with httpx.Client(base_url=found.url, headers=headers, timeout=TIMEOUT_S,
                      trust_env=False, verify=engine_tls.client_context()) as engine:  # fmt: skip
        try:
            loaded = _loaded(engine)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("adapters of %s: cannot read what its engine loaded: %s", row.name, exc)
            return set()
        wanted = {}
        fetch = _fetcher(row, spec)
        for adapter in spec.llm.lora.adapters:
            try:
                provide(adapter, folder, fetch)
            except AdapterError as exc:
                failed[adapter.name] = str(exc)
                continue
            wanted[adapter.name] = locate_adapter(adapter.name, adapter.model, placement)[0]
        for name, root in loaded.items():
            if wanted.get(name) != root and name not in failed:
                _call(engine, "/v1/unload_lora_adapter", {"lora_name": name})
                record(row.service, "AdapterUnloaded", f"adapter {name} unloaded", row.name)
        for name, path in wanted.items():
            if loaded.get(name) == path:
                continue
            error = _call(engine, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
            if error:
                failed[name] = error
            else:
                record(row.service, "AdapterLoaded", f"adapter {name} loaded", row.name)
    before = row.adapters or {}
    for name, why in failed.items():
        if (before.get("failed") or {}).get(name) != why:
            record(row.service, "AdapterFailed", f"adapter {name}: {why}", row.name)
    state = {"generation": generation, "loaded": [a for a in wanted if a not in failed],
             "failed": failed, "at": time.time()}  # fmt: skip
    Instance.objects.filter(pk=row.pk).update(adapters=state)
    if state["loaded"] != before.get("loaded"):
        publish_snapshot()
        return {row.service.name}
    return set()


def _fetcher(row: Instance, spec: ServiceSpec) -> Callable[[str], Path]:
    """Where an adapter from object storage or a hub is in the node's cache, staging it."""
    pins = VersionPins(row.service, row.spec_hash)

    def fetch(ref: str) -> Path:
        try:
            if is_hub_ref(ref):
                return stage_hub_model(ref, spec, pins, settings.WHARF_CACHE_DIR)
            return stage(source_from_env(ref), settings.WHARF_CACHE_DIR)
        except (StagingError, InstanceError, HubError) as exc:
            raise AdapterError(str(exc)) from None

    return fetch


def _loaded(engine: httpx.Client) -> dict[str, str]:
    """The adapters the engine has loaded: name -> the path it read them from."""
    answer = engine.get("/v1/models")
    answer.raise_for_status()
    return {m["id"]: m.get("root") or "" for m in answer.json()["data"] if m.get("parent")}


def _call(engine: httpx.Client, path: str, body: dict) -> str:
    """ "" once the engine did it; else its words (or the connection's) why not."""
    try:
        answer = engine.post(path, json=body)
    except httpx.HTTPError as exc:
        return f"the engine did not answer: {exc}"
    if answer.is_success:
        return ""
    with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
        body = answer.json()
        return str(body.get("error", {}).get("message") or body.get("message") or body)[:500]
    return f"{answer.status_code} {answer.text[:300]}"
