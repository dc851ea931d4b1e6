"""EAS's ServiceMirror calls (OpenAPI 2021-07-01) on …/services/{ClusterId}/{ServiceName}/mirror:
CreateServiceMirror (POST) and UpdateServiceMirror (PUT) with `Target` (services) and `Ratio`
(percent), DescribeServiceMirror (GET), DeleteServiceMirror (DELETE). Answered by the v1 API's
mirror logic (controlplane.services.api.mirror); a refusal names EAS's field."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.eas_api import queries
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.groups import checked
from controlplane.eas_api.views import EasView, answer, found
from controlplane.services.api.mirror import MirrorChange, remove_mirror, set_mirror

FIELDS = {"Target": "targets", "Ratio": "ratio"}


class ServiceMirror(EasView):
    def get(self, request: Request, cluster: str, name: str) -> Response:
        """DescribeServiceMirror: `Target` as a comma-separated list and `Ratio` as text, as
        EAS answers them; a service that mirrors nothing answers an empty Target, Ratio 0."""
        queries.only(request.query_params, ())
        mirror = found(request, name).mirror or {}
        return answer(ServiceName=name, Target=",".join(mirror.get("targets") or []),
                      Ratio=str(mirror.get("ratio") or 0))  # fmt: skip

    def post(self, request: Request, cluster: str, name: str) -> Response:
        """CreateServiceMirror."""
        return self._set(request, name, "created")

    def put(self, request: Request, cluster: str, name: str) -> Response:
        """UpdateServiceMirror."""
        return self._set(request, name, "updated")

    def _set(self, request: Request, name: str, what: str) -> Response:
        queries.only(request.query_params, ())
        found(request, name)
        if isinstance(request.data, dict) and request.data.get("Ratio") == 0:
            raise EasError("InvalidParameter", "Ratio: 0 copies nothing; DeleteServiceMirror "
                           "stops mirroring")  # fmt: skip
        set_mirror(request, name, checked(request.data, FIELDS, MirrorChange))
        return answer(Message=f"Service mirror of [{name}] {what}")

    def delete(self, request: Request, cluster: str, name: str) -> Response:
        """DeleteServiceMirror."""
        queries.only(request.query_params, ())
        found(request, name)
        remove_mirror(request, name)
        return answer(Message=f"Service mirror of [{name}] deleted")
