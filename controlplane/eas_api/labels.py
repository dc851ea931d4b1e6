"""EAS's UpdateServiceLabel (PUT …/label, `{"Labels": {key: value}}`) and DeleteServiceLabel
(DELETE …/label?Keys=a,b): the spec's `labels`, changed through the v1 API's replace (a new
version), as Terraform's alicloud_pai_service changes its `tags`."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from contracts.eas.written import eas_form
from controlplane.eas_api import queries
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.views import EasView, answer, found, shared
from controlplane.services.api.views import replace_spec
from controlplane.services.secrets import redact


def _relabelled(request: Request, name: str, labels: dict) -> Response:
    spec = eas_form(redact(found(request, name).spec))
    spec["labels"] = labels
    message = f"Labels of service [{name}] updated"
    return shared(replace_spec(request, name, spec), lambda: answer(Message=message))


class ServiceLabels(EasView):
    def put(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        body = request.data
        labels = body.get("Labels") if isinstance(body, dict) else None
        if not isinstance(labels, dict) or set(body) != {"Labels"}:
            raise EasError("InvalidParameter", 'the body must be {"Labels": {"key": "value"}}')
        current = found(request, name).spec.get("labels") or {}
        return _relabelled(request, name, {**current, **labels})

    def delete(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ("Keys",))
        keys = [key for key in request.query_params.get("Keys", "").split(",") if key]
        if not keys:
            raise EasError("InvalidParameter", "Keys: the label keys to delete, a,b")
        current = found(request, name).spec.get("labels") or {}
        if missing := [key for key in keys if key not in current]:
            raise EasError("InvalidParameter", f"Keys: no label {', '.join(missing)}")
        return _relabelled(request, name, {k: v for k, v in current.items() if k not in keys})
