"""A service's LoRA adapters: GET and POST /services/<name>/adapters, DELETE
/services/<name>/adapters/<adapter>.

Adding or removing an adapter is a new version of the spec like any other edit (so a rollback
restores the old list), saved through the same checks. On engines that load adapters while they
run (contracts.spec.RUNTIME_LORA_ENGINES) the adapters are not part of the spec hash: no
instance restarts, and each node loads or unloads them on its running engines
(workers.models.adapters). The gateways learn the new list at once; an adapter is routed to the
instances that have loaded it.
"""

from __future__ import annotations

import copy
from typing import Any

from django.db import transaction
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.spec import RUNTIME_LORA_ENGINES, ServiceSpec
from controlplane.services.api.errors import SpecInvalid
from controlplane.services.api.views import live_service, update_spec
from controlplane.services.models import Service
from controlplane.services.routing import publish_snapshot

FIELDS = ("name", "model")


def _adapters(service: Service, spec: ServiceSpec) -> dict[str, Any]:
    """The spec's adapters, each with where it is loaded: per instance `loaded`, `failed`
    (with why) or `loading`; on engines that only load adapters at start, `as started`."""
    lora = spec.llm.lora if spec.llm else None
    runtime_loading = bool(spec.llm and spec.llm.engine in RUNTIME_LORA_ENGINES)
    instances = list(service.instances.all())
    listed = []
    for adapter in lora.adapters if lora else []:
        where = []
        for row in instances:
            state = row.adapters or {}
            failed = (state.get("failed") or {}).get(adapter.name)
            if not state:
                found, why = "as started", ""
            elif failed:
                found, why = "failed", failed
            elif adapter.name in (state.get("loaded") or ()):
                found, why = "loaded", ""
            else:
                found, why = "loading", ""
            where.append({"instance": row.name, "node": row.node, "state": found,
                          "message": why})  # fmt: skip
        listed.append({"name": adapter.name, "model": adapter.model, "instances": where})
    return {
        "adapters": listed,
        "max_loras": lora.max_loras if lora else None,
        "max_rank": lora.max_rank if lora else None,
        "loaded_while_running": runtime_loading,
    }


def _adapter_body(data: Any) -> dict[str, str]:
    """{name, model} from the request, or a 400 naming what is wrong (the spec's own rules
    check the values themselves)."""
    if not isinstance(data, dict):
        raise SpecInvalid({"adapter": ['send a JSON object: {"name": ..., "model": ...}']})
    errors = {f: ["is required"] for f in FIELDS if f not in data}
    errors.update({f: ["Wharf does not support this field (yet); remove it"]
                   for f in data if f not in FIELDS})  # fmt: skip
    if errors:
        raise SpecInvalid(errors)
    return {f: data[f] for f in FIELDS}


def _renamed(errors: dict[str, list[str]], index: int) -> dict[str, list[str]]:
    """The spec's errors about the new adapter, named by the request's fields."""
    prefix = f"llm.lora.adapters[{index}]."
    return {key.removeprefix(prefix): value for key, value in errors.items()}


class ServiceAdapters(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = live_service(request, name)
        return Response(_adapters(service, service.parsed_spec()))

    def post(self, request: Request, name: str) -> Response:
        adapter = _adapter_body(request.data)
        with transaction.atomic():
            service = Service.objects.select_for_update().get(pk=live_service(request, name).pk)
            data = copy.deepcopy(service.spec)
            llm = data.get("llm")
            if not isinstance(llm, dict):
                raise SpecInvalid({"llm": ["adapters adapt a model: the service has no llm"]})
            lora = llm.setdefault("lora", {})
            lora = llm["lora"] = lora if isinstance(lora, dict) else {}
            names = [a.get("name") for a in lora.get("adapters", []) if isinstance(a, dict)]
            if adapter["name"] in names:
                return Response(
                    {"detail": f"Service {name!r} has an adapter named {adapter['name']!r}; "
                     "remove it first, or choose another name.",
                     "errors": {"name": ["already exists"]}},
                    status=status.HTTP_409_CONFLICT,
                )  # fmt: skip
            lora["adapters"] = [*lora.get("adapters", []), adapter]
            try:
                spec = update_spec(service, data, f"adapter {adapter['name']} added",
                                   f"adapter {adapter['name']} added")  # fmt: skip
            except SpecInvalid as exc:
                raise SpecInvalid(_renamed(exc.errors, len(names))) from None
            transaction.on_commit(publish_snapshot, robust=True)
        listed = _adapters(service, spec)["adapters"]
        body = next(a for a in listed if a["name"] == adapter["name"])
        return Response(body, status=status.HTTP_201_CREATED)


class ServiceAdapter(APIView):
    def delete(self, request: Request, name: str, adapter: str) -> Response:
        with transaction.atomic():
            service = Service.objects.select_for_update().get(pk=live_service(request, name).pk)
            data = copy.deepcopy(service.spec)
            lora = (data.get("llm") or {}).get("lora") or {}
            adapters = lora.get("adapters") or []
            kept = [a for a in adapters if a.get("name") != adapter]
            if len(kept) == len(adapters):
                known = ", ".join(a.get("name", "?") for a in adapters) or "none"
                return Response(
                    {"detail": f"Service {name!r} has no adapter {adapter!r} (it has: {known})."},
                    status=status.HTTP_404_NOT_FOUND,
                )
            lora["adapters"] = kept
            update_spec(service, data, f"adapter {adapter} removed", f"adapter {adapter} removed")
            transaction.on_commit(publish_snapshot, robust=True)
        return Response(status=status.HTTP_204_NO_CONTENT)
