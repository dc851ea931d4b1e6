"""EAS's autoscaler calls: Create/Update/Describe/DeleteServiceAutoScaler on
…/autoscaler. The autoscaler is the spec's own `autoscaler` section (contracts.spec_scaling,
EAS's shape), so each change is a spec update through the v1 API's replace (validated, a new
version, an event), and the workers' autoscaler acts on it as on any spec's."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from contracts.eas.written import eas_form
from controlplane.eas_api import queries
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.views import EasView, answer, found, shared
from controlplane.services.api.views import replace_spec
from controlplane.services.secrets import redact


def _spec_with(request: Request, name: str, autoscaler: dict | None) -> Response:
    """The service's spec (as EAS writes it) with `autoscaler` set, or removed for None."""
    spec = eas_form(redact(found(request, name).spec))
    spec.pop("autoscaler", None)
    if autoscaler is not None:
        spec["autoscaler"] = autoscaler
    return replace_spec(request, name, spec)


def _autoscaler_of(request: Request, name: str) -> dict:
    autoscaler = found(request, name).spec.get("autoscaler")
    if not isinstance(autoscaler, dict):
        raise EasError(
            "InvalidAutoScaler.NotFound",
            f"Service {name!r} has no autoscaler; create one with CreateServiceAutoScaler.",
            404,
        )
    return autoscaler


class ServiceAutoscaler(EasView):
    def post(self, request: Request, cluster: str, name: str) -> Response:
        """CreateServiceAutoScaler: refused where the service has one (update it instead)."""
        queries.only(request.query_params, ())
        if isinstance(found(request, name).spec.get("autoscaler"), dict):
            raise EasError(
                "InvalidParameter",
                f"Service {name!r} has an autoscaler; change it with UpdateServiceAutoScaler.",
            )
        return self._set(request, name, "created")

    def put(self, request: Request, cluster: str, name: str) -> Response:
        """UpdateServiceAutoScaler: the body replaces the autoscaler."""
        queries.only(request.query_params, ())
        _autoscaler_of(request, name)
        return self._set(request, name, "updated")

    def get(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        autoscaler = _autoscaler_of(request, name)
        return answer(
            ServiceName=name, MinReplica=autoscaler.get("min"), MaxReplica=autoscaler.get("max"),
            ScaleStrategies=autoscaler.get("scaleStrategies", []),
            Behavior=autoscaler.get("behavior", {}),
            CurrentMetrics=[],  # the gateways' figures are not kept per strategy here
        )  # fmt: skip

    def delete(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        _autoscaler_of(request, name)
        message = f"Autoscaler of service [{name}] deleted"
        return shared(_spec_with(request, name, None), lambda: answer(Message=message))

    @staticmethod
    def _set(request: Request, name: str, done: str) -> Response:
        body = request.data
        if not isinstance(body, dict):
            raise EasError("InvalidParameter", "the body must be the autoscaler's JSON object")
        message = f"Autoscaler of service [{name}] {done}"
        return shared(_spec_with(request, name, body), lambda: answer(Message=message))
