"""The paths machines call on the API (probes and Prometheus), answered before the rest of the
middleware: the kubelet and Prometheus' Kubernetes discovery call a pod by its IP, which is in
no WHARF_ALLOWED_HOSTS, and a probe must not be redirected to HTTPS or need a session.

- GET /healthz, GET /readyz: controlplane.health (open: they name nothing);
- GET /metrics: controlplane.metrics.exposition (the operator's bearer token).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from controlplane import health
from controlplane.metrics import exposition

ENDPOINTS: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": health.healthz,
    "/readyz": health.readyz,
    "/metrics": exposition.metrics,
}


class MachineEndpoints:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = ENDPOINTS.get(request.path_info)
        return view(request) if view is not None else self.get_response(request)
